package repo

import (
	"context"
	"sync"
	"time"

	"github.com/combo-service/combo-service/kitex_gen/combo"
)

// coalescer lets concurrent Report calls share pipelines. A call joins the
// pending list; if fewer than maxInFlight pipelines are running, the caller
// runs one itself over everything pending, otherwise it waits for a running
// caller to take it along. Under load one round trip serves many RPCs, which
// halves Redis's CPU per report and spares the pool a connection per call;
// when idle a call runs alone at once, so nothing waits on a timer.
type coalescer struct {
	r           *Repo
	maxInFlight int
	maxItems    int // contributions per shared pipeline (one call is never split)
	// bigCall: calls at least this large run at once on their own pipeline:
	// they amortize a round trip already, and queueing them behind each
	// other would leave Redis idle between pipelines.
	bigCall int

	mu      sync.Mutex
	pending []*reportCall
	running int
}

type reportCall struct {
	ctx  context.Context
	cs   []*combo.Contribution
	res  []ReportResult
	err  error
	done chan struct{}
}

func (c *coalescer) do(ctx context.Context, cs []*combo.Contribution) ([]ReportResult, error) {
	call := &reportCall{ctx: ctx, cs: cs, done: make(chan struct{})}
	if len(cs) >= c.bigCall {
		c.run([]*reportCall{call})
		return call.res, call.err
	}
	c.mu.Lock()
	c.pending = append(c.pending, call)
	if c.running < c.maxInFlight {
		c.running++
		for len(c.pending) > 0 {
			batch := c.take()
			c.mu.Unlock()
			c.run(batch)
			c.mu.Lock()
		}
		c.running--
	}
	c.mu.Unlock()
	select {
	case <-call.done:
		return call.res, call.err
	case <-ctx.Done():
		// The pipeline may still count it; the caller may retry safely
		// (ids dedupe).
		return nil, wrap("repo.Report", ctx.Err())
	}
}

// take removes pending calls up to maxItems contributions (at least one
// call); c.mu is held.
func (c *coalescer) take() []*reportCall {
	n, items := 0, 0
	for n < len(c.pending) && (n == 0 || items+len(c.pending[n].cs) <= c.maxItems) {
		items += len(c.pending[n].cs)
		n++
	}
	batch := make([]*reportCall, n)
	copy(batch, c.pending[:n])
	c.pending = c.pending[n:]
	if len(c.pending) == 0 {
		c.pending = nil // let the backing array go
	}
	return batch
}

// run executes one shared pipeline and answers every call in it.
func (c *coalescer) run(batch []*reportCall) {
	live := batch[:0:0]
	var all []*combo.Contribution
	for _, call := range batch {
		if err := call.ctx.Err(); err != nil { // gave up while queued: skip
			call.err = wrap("repo.Report", err)
			close(call.done)
			continue
		}
		live = append(live, call)
		all = append(all, call.cs...)
	}
	if len(live) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.r.set.Timeout)
	defer cancel()
	start := time.Now()
	replies, err := c.r.execute(ctx, all)
	if observe := c.r.set.ObservePipeline; observe != nil {
		observe(len(all), time.Since(start))
	}
	off := 0
	for _, call := range live {
		if err != nil {
			call.err = err
		} else {
			call.res, call.err = c.r.results(ctx, call.cs, replies[off:off+len(call.cs)])
		}
		off += len(call.cs)
		close(call.done)
	}
}
