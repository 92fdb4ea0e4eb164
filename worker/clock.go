package worker

import (
	"sync/atomic"
	"time"
)

// redisClock maps Redis's clock, which decides when a window is due, onto
// this host's clock, which the flusher's timer runs on. The offset is
// learned from Redis TIME and from every "early" flush reply, so a skewed
// host clock costs at most one early retry, never an early publish (the
// flush script itself refuses to publish before due).
type redisClock struct {
	offsetMs atomic.Int64 // redis ms - local ms
}

// observe records that Redis said redisMs at about local time at.
func (c *redisClock) observe(redisMs int64, at time.Time) {
	c.offsetMs.Store(redisMs - at.UnixMilli())
}

// local converts a Redis-clock ms timestamp to local time.
func (c *redisClock) local(redisMs int64) time.Time {
	return time.UnixMilli(redisMs - c.offsetMs.Load())
}
