package worker

import (
	"sync"
	"time"
)

// redisClock estimates the clock of a Redis node, which decides when its
// shards' windows are due (the stream id's ms part is that node's TIME when
// the window opened), so the flushers can sleep until then. The shards of
// one Redis share one; on a cluster each shard has its own
// (Config.NodePerShard).
//
// Every reading of the node's clock (TIME, by a script keyed to a shard,
// in each housekeeping round, and the time every flush reply carries) was
// taken by Redis at some moment between sending the call and receiving its
// reply, so it
// bounds Redis's clock at receipt: at least the reading, at most the
// reading plus the round trip (and 1 ms of truncation). The estimate is a
// lower bound, kept while each new reading agrees with it: a reading above
// it raises it, one whose upper bound is below it (Redis's clock jumped
// back, as on a failover to a master behind this one) replaces it. So
// windows go out at most a round trip late and never early (the flush
// script itself refuses to publish before due), and a jump of Redis's
// clock either way is learned from the next reply or housekeeping round.
//
// Between readings the estimate runs on this host's monotonic clock: a
// step of the host's wall clock (NTP, a VM resume) does not move it.
type redisClock struct {
	mu      sync.Mutex
	has     bool
	redisMs int64     // the estimate at at
	at      time.Time // local, with its monotonic reading
}

// observe takes a reading: Redis's clock said redisMs at some moment
// between sent and recv (local times). It reports whether the estimate
// moved by more than movedMs (or this is the first reading): the flushers'
// timers, set from the old estimate, are then wrong by as much.
func (c *redisClock) observe(redisMs int64, sent, recv time.Time) (moved bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.has {
		est := c.redisMs + recv.Sub(c.at).Milliseconds()
		if upper := redisMs + recv.Sub(sent).Milliseconds() + 1; est >= redisMs && est <= upper {
			return false // agrees, and is at least as close
		}
		moved = est-redisMs > movedMs || redisMs-est > movedMs
	} else {
		// Before the first reading the estimate was the local wall clock.
		local := recv.UnixMilli()
		moved = local-redisMs > movedMs || redisMs-local > movedMs
	}
	c.has, c.redisMs, c.at = true, redisMs, recv
	return moved
}

// movedMs is how far the estimate may move without waking the flushers: a
// few ms of lateness is within a round trip, and a raise by a ms or two
// comes with many flush replies.
const movedMs = 5

// known reports whether the estimate has had a reading of Redis's clock.
func (c *redisClock) known() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.has
}

// now estimates Redis's clock, in ms. Before the first reading it is the
// local wall clock.
func (c *redisClock) now() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.has {
		return time.Now().UnixMilli()
	}
	return c.redisMs + time.Since(c.at).Milliseconds()
}

// until is how long from now until Redis's clock reads redisMs, to the
// local clock's precision (now() truncates to whole ms).
func (c *redisClock) until(redisMs int64) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.has {
		return time.Until(time.UnixMilli(redisMs))
	}
	return time.Duration(redisMs-c.redisMs)*time.Millisecond - time.Since(c.at)
}
