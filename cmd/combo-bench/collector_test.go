package main

import (
	"testing"
	"time"
)

// add records one push for activity, as the receive loop does.
func (c *collector) add(activity int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.tracked[activity] = append(c.tracked[activity], pushed{Recv: time.Now()})
}

// waitFor keeps waiting past due while pushes still arrive, so the tail of
// a burst is not counted as missing, and stops once they pause for quiet.
func TestWaitForFollowsTrailingPushes(t *testing.T) {
	c := &collector{tracked: map[int64][]pushed{}}
	c.track(1)
	due := time.Now().Add(50 * time.Millisecond)
	quiet := time.Second
	go func() {
		// 10 pushes, 100 ms apart: the last comes ~1 s after due, each
		// within quiet of the one before.
		for range 10 {
			time.Sleep(100 * time.Millisecond)
			c.add(1)
		}
	}()
	c.waitFor(1, 10, due, quiet)
	if n := c.count(1); n != 10 {
		t.Fatalf("waitFor returned with %d of 10 pushes", n)
	}

	// Pushes that stop short: waitFor gives up about quiet after the last.
	c.track(2)
	c.add(2)
	start := time.Now()
	c.waitFor(2, 5, time.Now(), quiet)
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("waitFor waited %v for pushes that never came", took)
	}
	if n := c.count(2); n != 1 {
		t.Fatalf("count %d, want 1", n)
	}
}
