package handler

import (
	"context"
	"errors"
	"sync/atomic"
	"time"
)

// ErrDraining refuses a report that arrives once the service has begun to
// stop: it answers UNAVAILABLE, and the caller sends it again elsewhere.
var ErrDraining = errors.New("combo-service is stopping; send the report to another replica")

// gate lets report RPCs in until Drain, which then waits for those in
// flight. Kitex stops taking connections on SIGTERM but keeps serving ones
// that never fall idle (a client's busy pooled connections) after its exit
// wait; main drains the gate before the worker's last read of the stream,
// so no report is acknowledged after that read, which would leave its
// window to another replica or, with none, to the next start.
type gate struct {
	inFlight atomic.Int64
	closed   atomic.Bool
}

// enter admits a report RPC; a caller that gets true must call leave.
// Counting before looking at closed is what lets Drain trust a count of 0:
// a call that saw the gate open is already counted.
func (g *gate) enter() bool {
	g.inFlight.Add(1)
	if g.closed.Load() {
		g.inFlight.Add(-1)
		return false
	}
	return true
}

func (g *gate) leave() { g.inFlight.Add(-1) }

// drain closes the gate and waits until no admitted call is in flight, or
// ctx ends. It polls: it runs once, at shutdown, and the hot path pays two
// atomic adds rather than a lock.
func (g *gate) drain(ctx context.Context) error {
	g.closed.Store(true)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for g.inFlight.Load() > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	return nil
}
