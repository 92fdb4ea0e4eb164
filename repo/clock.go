package repo

import (
	"context"
	"sync/atomic"
	"time"
)

// clockResync is how often the estimate of Redis's clock is refreshed.
// Two NTP-disciplined clocks drift apart by well under a millisecond in
// that time; a failover to a Redis host whose clock differs is caught at
// the next resync.
const clockResync = time.Minute

// redisClock estimates Redis's clock (TIME) from this process's clock. The
// dedupe bucket of a report is by Redis's clock, the one clock all replicas
// share, but calling TIME and formatting the bucket inside the report
// script cost as much as counting a report; so Go learns the offset now and
// then and computes the bucket itself. Its error is half a round trip.
type redisClock struct {
	offset  atomic.Int64 // ns, Redis minus local
	synced  atomic.Int64 // local unix ns of the last sync; 0: never
	syncing atomic.Bool
}

// observe records one TIME reply, sent and received at the local times given.
func (c *redisClock) observe(redis, sent, received time.Time) {
	mid := sent.Add(received.Sub(sent) / 2)
	c.offset.Store(int64(redis.Sub(mid)))
	c.synced.Store(received.UnixNano())
}

// now is the estimate of Redis's clock. When the estimate is old it starts
// one resync in the background (bounded by the repo's timeout) and goes on
// with the old offset; before the first sync it is the local clock.
func (r *Repo) redisNow() time.Time {
	local := time.Now()
	if local.UnixNano()-r.clock.synced.Load() > int64(clockResync) && r.clock.syncing.CompareAndSwap(false, true) {
		go func() {
			defer r.clock.syncing.Store(false)
			ctx, cancel := context.WithTimeout(context.Background(), r.set.Timeout)
			defer cancel()
			_, _ = r.Time(ctx) // on failure the next call tries again
		}()
	}
	return local.Add(time.Duration(r.clock.offset.Load()))
}
