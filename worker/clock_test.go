package worker

import (
	"testing"
	"time"
)

func TestRedisClockRunsOnFromItsEstimate(t *testing.T) {
	// Each figure is bounded by wall-clock readings taken around it, not
	// by a fixed margin: a loaded machine can stall between two lines.
	var c redisClock
	before := time.Now().UnixMilli()
	got := c.now()
	if after := time.Now().UnixMilli(); got < before || got > after {
		t.Fatalf("before any reading now() = %d, want the wall clock, between %d and %d", got, before, after)
	}
	at := time.Now().Add(-250 * time.Millisecond)
	c.observe(1_000_000, at, at)
	got = c.now()
	if max := 1_000_000 + time.Since(at).Milliseconds(); got < 1_000_250 || got > max {
		t.Fatalf("now() = %d, want 1000250 to %d: the reading and the time since", got, max)
	}
	start := time.Now()
	d := c.until(c.now() + 100)
	// now() truncates to whole ms: up to 1 ms less, and the time taken.
	if least := 100*time.Millisecond - time.Millisecond - time.Since(start); d > 100*time.Millisecond || d < least {
		t.Fatalf("until(now+100ms) = %s, want %s to 100ms", d, least)
	}
}

// The estimate is the best lower bound the readings agree with.
func TestRedisClockKeepsTheBestAgreeingReading(t *testing.T) {
	base := time.Now()
	ms := func(n int) time.Time { return base.Add(time.Duration(n) * time.Millisecond) }
	var c redisClock
	c.observe(10_000, ms(0), ms(0))
	estAt := func(at time.Time) int64 { return c.redisMs + at.Sub(c.at).Milliseconds() }
	steps := []struct {
		name       string
		reading    int64
		sent, recv time.Time
		want       int64 // the estimate at recv afterwards
	}{
		// Taken 3 ms before its reply arrived (a 5 ms round trip): agrees,
		// and the estimate is closer: kept.
		{"lagging reading", 10_097, ms(95), ms(100), 10_100},
		// Above the estimate: Redis is at least there; raised.
		{"higher reading", 10_210, ms(199), ms(200), 10_210},
		// Far below even with its round trip: Redis's clock went back.
		{"clock jumped back", 9_000, ms(299), ms(300), 9_000},
		{"after the jump, a lagging reading", 9_098, ms(397), ms(400), 9_100},
	}
	for _, s := range steps {
		c.observe(s.reading, s.sent, s.recv)
		if got := estAt(s.recv); got != s.want {
			t.Fatalf("%s: estimate %d, want %d", s.name, got, s.want)
		}
	}
}

// observe says when the estimate moved enough to wake the flushers: their
// timers were set from the old one.
func TestRedisClockSaysWhenItMoved(t *testing.T) {
	now := time.Now()
	var c redisClock
	if !c.observe(now.UnixMilli()+3000, now, now) {
		t.Fatal("a first reading 3 s off the local clock: not moved")
	}
	var same redisClock
	if same.observe(now.UnixMilli(), now, now) {
		t.Fatal("a first reading equal to the local clock: moved")
	}
	at := now.Add(100 * time.Millisecond)
	if c.observe(now.UnixMilli()+3100, at, at) {
		t.Fatal("an agreeing reading: moved")
	}
	at = at.Add(100 * time.Millisecond)
	if c.observe(now.UnixMilli()+3202, at, at) {
		t.Fatal("a raise by 2 ms: moved")
	}
	at = at.Add(100 * time.Millisecond)
	if !c.observe(now.UnixMilli()+1300, at, at) {
		t.Fatal("a jump back by 2 s (a failover): not moved")
	}
}
