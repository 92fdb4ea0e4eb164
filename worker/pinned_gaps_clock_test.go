package worker

import (
	"testing"
	"time"
)

// observe says "moved" once the estimate moves by more than a few ms
// (movedMs), not only by seconds as a failover's jump does: a flusher
// asleep on a timer set from the old estimate wakes late by as much as it
// moved, and a threshold of hundreds of ms let every window go out up to
// that late after a reading corrected the estimate (TestRedisClockSaysWhenItMoved
// moves it by 2 ms and by seconds only, both sides of any threshold
// between).
func TestRedisClockSaysWhenItMovedByTensOfMs(t *testing.T) {
	now := time.Now()
	var first redisClock
	if !first.observe(now.UnixMilli()+50, now, now) {
		t.Fatal("a first reading 50 ms ahead of the local clock: not moved")
	}
	var c redisClock
	c.observe(1_000_000, now, now)
	at := now.Add(100 * time.Millisecond)
	if c.observe(1_000_100, at, at) {
		t.Fatal("an agreeing reading: moved")
	}
	at = at.Add(100 * time.Millisecond)
	if !c.observe(1_000_208, at, at) {
		t.Fatal("a raise by 8 ms: not moved")
	}
	at = at.Add(100 * time.Millisecond)
	// The estimate is 1_000_308 here; a reading 50 ms below it, taken
	// with no round trip, says Redis's clock went back by 50 ms.
	if !c.observe(1_000_258, at, at) {
		t.Fatal("a jump back by 50 ms: not moved")
	}
}
