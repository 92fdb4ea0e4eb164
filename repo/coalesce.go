package repo

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/combo-service/combo-service/kitex_gen/combo"
)

// ErrPipelinePanic fails the calls of a report pipeline that panicked
// (Settings.OnPanic has the panic). Nothing is known of what Redis did
// with them: like any unanswered report, they may have been counted, and a
// retry answers duplicate if so.
var ErrPipelinePanic = errors.New("internal error: the report pipeline panicked")

// coalescer lets concurrent Report calls share pipelines. A call joins the
// pending list; if fewer than maxInFlight pipelines are running, the caller
// runs one itself over everything pending, and more until its own call is
// answered; if calls are still pending then, a goroutine carries on running
// pipelines until none is, and the caller returns. Otherwise the call waits
// for a running pipeline to take it along. Under load one round trip serves
// many RPCs, which halves Redis's CPU per report and spares the pool a
// connection per call; when idle a call runs alone at once, so nothing
// waits on a timer. No caller runs pipelines for others beyond its own
// answer: that would hold its RPC for as long as the load lasted. A call
// that has waited a whole Timeout for a pipeline fails unsent (expire), and
// so do the calls queued behind a pipeline Redis did not answer in time
// (failQueued).
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
	ctx    context.Context
	queued time.Time
	cs     []*combo.Contribution
	res    []ReportResult
	err    error
	done   chan struct{}
}

func (c *coalescer) do(ctx context.Context, cs []*combo.Contribution) ([]ReportResult, error) {
	if len(cs) >= c.bigCall {
		return c.alone(ctx, cs)
	}
	call := &reportCall{ctx: ctx, cs: cs, done: make(chan struct{}), queued: time.Now()}
	c.mu.Lock()
	c.pending = append(c.pending, call)
	if c.running < c.maxInFlight {
		c.running++
		for len(c.pending) > 0 && !answered(call) {
			batch := c.take()
			c.mu.Unlock()
			err := c.run(batch)
			c.mu.Lock()
			c.failQueued(err)
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
		if i := slices.Index(c.pending, call); i >= 0 { // still queued: leave, unsent
			c.pending = slices.Delete(c.pending, i, i+1)
			c.mu.Unlock()
			return nil, fmt.Errorf("repo.Report: %w: %w", ErrCallerGone, ctx.Err())
		}
		c.mu.Unlock()
		// Answered already, or carried by a pipeline under way: wait for
		// its answer (within that pipeline's redis.timeout, its degraded
		// publish included), so that what Redis did with the reports is
		// answered and counted. Its reports may have been counted, opened
		// windows, or been published on their own: answered as the
		// caller gone, that push showed in no metric and no log line.
		<-call.done
		return call.res, call.err
	}
}

// alone runs a call on a pipeline of its own, once one of the repo's
// slots for such pipelines is free (see aloneSlots); its redis.timeout
// starts then. A call that waits redis.timeout for a slot fails unsent.
func (c *coalescer) alone(ctx context.Context, cs []*combo.Contribution) ([]ReportResult, error) {
	release, err := c.r.takeAloneSlots(ctx, cs)
	if err != nil {
		return nil, err
	}
	defer release()
	call := &reportCall{ctx: ctx, cs: cs, done: make(chan struct{})}
	_ = c.run([]*reportCall{call}) // its error is call.err
	return call.res, call.err
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
		c.failQueued(err)
	}
	c.running--
}

// expire answers, unsent, the pending calls that have waited Timeout for a
// pipeline (c.mu is held). Only one pipeline is in flight: when Redis stops
// answering (a partition, a dead host), each waits out the whole Timeout,
// and without this every call queued behind would wait for as many
// Timeouts as there are pipelines of 1000 ahead of it. With it no call
// waits much more than two: the one it queued behind, and its own. A Redis
// that only stalls now and then still gets each call sent once. (When the
// pipeline ahead gets no answer at all, failQueued fails the queue with
// it; this bounds the wait of a queue deeper than a pipeline that Redis
// answers slowly.)
func (c *coalescer) expire() {
	if len(c.pending) == 0 || time.Since(c.pending[0].queued) < c.r.set.Timeout {
		return // oldest first: none has waited that long
	}
	now := time.Now()
	kept := c.pending[:0]
	for _, call := range c.pending {
		if now.Sub(call.queued) < c.r.set.Timeout {
			kept = append(kept, call)
			continue
		}
		if err := call.ctx.Err(); err != nil { // as in run: not Redis's fault
			call.err = fmt.Errorf("repo.Report: %w: %w", ErrCallerGone, err)
		} else {
			call.err = &opError{op: "repo.Report", unavailable: true,
				err: fmt.Errorf("waited %s (redis.timeout) for a pipeline to Redis, unsent", c.r.set.Timeout)}
		}
		close(call.done)
	}
	clear(c.pending[len(kept):])
	c.pending = kept
}

// failQueued answers, unsent, every pending call once a shared pipeline
// got no answer from Redis within Timeout (c.mu is held): they were
// queued while Redis stayed silent, and a second pipeline into that
// silence made them wait two Timeouts, the whole of client.NewClient's
// 1 s RPC timeout with the default redis.timeout, so during a stall
// callers got Kitex's timeout instead of UNAVAILABLE. Unsent, each is
// safe to send again. A pipeline that failed fast (refused, a reply
// such as BUSY or READONLY) or was answered, however slowly, leaves the
// queue to the next one.
func (c *coalescer) failQueued(err error) {
	if len(c.pending) == 0 || !silent(err) {
		return
	}
	cause := err
	if oe := (*opError)(nil); errors.As(err, &oe) {
		cause = oe.err // its text names the op and redis.timeout already
	}
	for _, call := range c.pending {
		if cerr := call.ctx.Err(); cerr != nil { // as in run: not Redis's fault
			call.err = fmt.Errorf("repo.Report: %w: %w", ErrCallerGone, cerr)
		} else {
			call.err = &opError{op: "repo.Report", unavailable: true, within: reportTimeout,
				err: fmt.Errorf("none for the pipeline ahead of it, unsent: %w", cause)}
		}
		close(call.done)
	}
	clear(c.pending)
	c.pending = nil
}

// silent tells whether err says Redis gave no answer within its time,
// the error that fails the queue behind (failQueued).
func silent(err error) bool { return err != nil && errors.Is(err, ErrUnavailable) && timedOut(err) }

func answered(call *reportCall) bool {
	select {
	case <-call.done:
		return true
	default:
		return false
	}
}

// take removes pending calls up to maxItems contributions (at least one
// call, unless expire answered them all); c.mu is held.
func (c *coalescer) take() []*reportCall {
	c.expire()
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

// run executes one shared pipeline and answers every call in it; it
// returns the pipeline's own error (Redis not answering, say, the report
// scripts or the degraded publish that follows them), nil when the
// pipeline was answered or not sent.
func (c *coalescer) run(batch []*reportCall) error {
	// A panic (a bug, a hook of the Redis client) fails the calls of this
	// pipeline only. Unwinding on, it left them unanswered and the running
	// slot of its goroutine taken: every later call on the shard waited,
	// unsent, until its caller gave up, for as long as the process lived;
	// and in drain, which no one recovers, it ended the process.
	defer func() {
		if p := recover(); p != nil {
			if c.r.set.OnPanic != nil {
				c.r.set.OnPanic(p, debug.Stack())
			}
			err := fmt.Errorf("repo.Report: %w", ErrPipelinePanic)
			for _, call := range batch {
				if !answered(call) {
					call.err = err
					close(call.done)
				}
			}
		}
	}()
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
	// Timed to the last reply its calls wait for: the report scripts and,
	// when some degrade, their publish, a second round trip.
	observe := func() {
		if o := c.r.set.ObservePipeline; o != nil {
			o(len(all), time.Since(start))
		}
	}
	replies, err := c.r.execute(ctx, all)
	if err != nil {
		observe()
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
	answers, err := c.r.results(ctx, all, replies, sizes)
	observe()
	for i, a := range answers {
		live[i].res, live[i].err = a.res, a.err
		close(live[i].done)
		// Redis stopped answering part way (execute keeps the replies
		// read before): the queue fails as behind a pipeline it did not
		// answer at all. That silence wins over an error Redis answered
		// before it (another call's denied channel), which failQueued
		// leaves the queue to: the calls behind were sent into the
		// silence, and waited a second redis.timeout.
		if errors.Is(a.err, ErrUnavailable) && (err == nil || !silent(err) && silent(a.err)) {
			err = a.err
		}
	}
	return err // a degraded publish Redis did not answer fails the queue too
}
