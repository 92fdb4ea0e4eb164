package repo

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/combo-service/combo-service/kitex_gen/combo"
)

// coalescer lets concurrent Report calls share pipelines. A call joins the
// pending list; if fewer than maxInFlight pipelines are running, the caller
// runs one itself over everything pending, and more until its own call is
// answered; if calls are still pending then, a goroutine carries on running
// pipelines until none is, and the caller returns. Otherwise the call waits
// for a running pipeline to take it along. Under load one round trip serves
// many RPCs, which halves Redis's CPU per report and spares the pool a
// connection per call; when idle a call runs alone at once, so nothing
// waits on a timer. No caller runs pipelines for others beyond its own
// answer: that would hold its RPC for as long as the load lasted. When
// Redis does not answer a pipeline, the calls queued behind it fail at once
// (failPending).
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
	running int // callers and drain goroutines running pipelines
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
		for len(c.pending) > 0 && !answered(call) {
			batch := c.take()
			c.mu.Unlock()
			err := c.run(batch)
			c.mu.Lock()
			c.failPending(err)
		}
		if len(c.pending) > 0 {
			go c.drain() // takes over this caller's running slot
		} else {
			c.running--
		}
	}
	c.mu.Unlock()
	select {
	case <-call.done:
		return call.res, call.err
	case <-ctx.Done():
		c.mu.Lock()
		defer c.mu.Unlock()
		if answered(call) { // answered after all: never report it failed
			return call.res, call.err
		}
		// Leave the queue if still in it. A pipeline already carrying it
		// may still count it; the caller may retry safely (ids dedupe).
		c.pending = slices.DeleteFunc(c.pending, func(p *reportCall) bool { return p == call })
		return nil, fmt.Errorf("repo.Report: %w: %w", ErrCallerGone, ctx.Err())
	}
}

// drain runs pipelines until nothing is pending, on a running slot handed
// to it by a caller that has its answer.
func (c *coalescer) drain() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.pending) > 0 {
		batch := c.take()
		c.mu.Unlock()
		err := c.run(batch)
		c.mu.Lock()
		c.failPending(err)
	}
	c.running--
}

// failPending answers every queued call with err when err says Redis did
// not answer the pipeline just run (c.mu is held). Those calls were not
// sent, so failing them is safe, and it is fast: each would otherwise wait
// out a whole Timeout of its own, one pipeline after another, and a Redis
// that stops answering (a partition, a dead host) would hold every call
// for as long as the queue behind the one pipeline in flight is deep.
func (c *coalescer) failPending(err error) {
	if err == nil || !errors.Is(err, ErrUnavailable) {
		return
	}
	for _, call := range c.pending {
		call.err = err
		close(call.done)
	}
	c.pending = nil
}

func answered(call *reportCall) bool {
	select {
	case <-call.done:
		return true
	default:
		return false
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

// run executes one shared pipeline and answers every call in it. It returns
// the pipeline's error when Redis did not answer it.
func (c *coalescer) run(batch []*reportCall) error {
	live := batch[:0:0]
	var all []*combo.Contribution
	for _, call := range batch {
		if err := call.ctx.Err(); err != nil { // gave up while queued: skip
			// Not wrap: a ctx error is no Redis reply, which wrap would
			// count as Redis unavailable and page for it.
			call.err = fmt.Errorf("repo.Report: %w: %w", ErrCallerGone, err)
			close(call.done)
			continue
		}
		live = append(live, call)
		all = append(all, call.cs...)
	}
	if len(live) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.r.set.Timeout)
	defer cancel()
	start := time.Now()
	replies, err := c.r.execute(ctx, all)
	if observe := c.r.set.ObservePipeline; observe != nil {
		observe(len(all), time.Since(start))
	}
	if err != nil {
		for _, call := range live {
			call.err = err
			close(call.done)
		}
		return err
	}
	sizes := make([]int, len(live))
	for i, call := range live {
		sizes[i] = len(call.cs)
	}
	for i, a := range c.r.results(ctx, all, replies, sizes) {
		live[i].res, live[i].err = a.res, a.err
		close(live[i].done)
	}
	return nil
}
