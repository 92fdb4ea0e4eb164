package worker

import (
	"sync/atomic"
	"time"
)

// redisClock estimates Redis's clock, which decides when a window is due
// (the stream id's ms part is Redis's TIME when the window opened), so the
// flusher can sleep until then. It keeps the last reading of Redis's clock
// and the local monotonic time it was taken at: a step of this host's wall
// clock (NTP, a VM resume) does not move the estimate. Readings come from
// TIME at start and from the housekeeper, and from every flush reply, which
// carries Redis's time: a jump of Redis's own clock (a failover to a master
// whose clock differs) is learned by the next flush or sample. A reading
// is stamped when its reply arrived, so the estimate lags Redis by at most
// a round trip: windows go out that much late, never early (the flush
// script itself refuses to publish before due).
type redisClock struct {
	last atomic.Pointer[clockReading]
}

type clockReading struct {
	redisMs int64
	at      time.Time // local, with its monotonic reading
}

// observe records that Redis said redisMs at about local time at.
func (c *redisClock) observe(redisMs int64, at time.Time) {
	c.last.Store(&clockReading{redisMs: redisMs, at: at})
}

// now estimates Redis's clock, in ms. Before the first reading it is the
// local wall clock.
func (c *redisClock) now() int64 {
	r := c.last.Load()
	if r == nil {
		return time.Now().UnixMilli()
	}
	return r.redisMs + time.Since(r.at).Milliseconds()
}

// until is how long from now until Redis's clock reads redisMs.
func (c *redisClock) until(redisMs int64) time.Duration {
	return time.Duration(redisMs-c.now()) * time.Millisecond
}
