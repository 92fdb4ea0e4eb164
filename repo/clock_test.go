package repo

import (
	"context"
	"testing"
	"time"

	"github.com/combo-service/combo-service/internal/testredis"
)

func TestClockOffsetFromOneObservation(t *testing.T) {
	var c redisClock
	sent := time.Unix(1_700_000_000, 0)
	// Redis is 5 s ahead; its reply was taken halfway through a 2 ms round trip.
	c.observe(sent.Add(5*time.Second+time.Millisecond), sent, sent.Add(2*time.Millisecond))
	if got := time.Duration(c.offset.Load()); got != 5*time.Second {
		t.Fatalf("offset %s, want 5s", got)
	}
	if c.synced.Load() != sent.Add(2*time.Millisecond).UnixNano() {
		t.Fatal("synced not recorded")
	}
}

// The dedupe bucket is computed from redisNow: it must follow Redis's
// clock, and an old estimate must refresh itself without blocking.
func TestRedisNowFollowsRedisAndResyncs(t *testing.T) {
	rdb := testredis.Start(t, testredis.Options{}).Client()
	r := New(rdb, Settings{Window: time.Second, Dedupe: time.Minute, Stale: time.Minute, Timeout: time.Second, Shards: 1, StreamMaxLen: 1000})
	// Pretend the last sync was long ago with a wildly wrong offset.
	r.clock.offset.Store(int64(time.Hour))
	r.clock.synced.Store(1)
	_ = r.redisNow() // starts the resync in the background
	deadline := time.Now().Add(5 * time.Second)
	for r.clock.synced.Load() == 1 {
		if time.Now().After(deadline) {
			t.Fatal("no resync")
		}
		time.Sleep(5 * time.Millisecond)
	}
	redisTime, err := rdb.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	if d := r.redisNow().Sub(redisTime); d < -100*time.Millisecond || d > 100*time.Millisecond {
		t.Fatalf("redisNow is %s off Redis's TIME", d)
	}
}
