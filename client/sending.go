package client

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cloudwego/kitex/client/callopt"

	"github.com/combo-service/combo-service/kitex_gen/combo"
)

// send delivers one batch, retrying with exponential backoff, and resolves it.
// An INVALID_ARGUMENT refusal that names one item drops that item and sends
// the rest again at once: not a retry, and bounded since each such round
// removes an item.
func (r *Reporter) send(b *batch) {
	defer func() {
		<-r.slots
		r.sends.Done()
	}()

	backoff := r.opts.InitialBackoff
	retries := r.opts.retries()
	var err error
	attempt := 0    // retries so far (resends after a refused item excluded)
	resend := false // the last round dropped a refused item: go again at once
	for {
		if attempt > 0 && !resend {
			t := time.NewTimer(jittered(backoff, r.randN))
			select {
			case <-t.C:
			case <-r.ctx.Done(): // aborted: the batch is already dropped
				t.Stop()
				return
			}
			backoff = min(2*backoff, r.opts.MaxBackoff)
			if !r.countRetry(b) {
				return
			}
		}
		resend = false
		var ans answers
		if ans, err = r.attempt(b.items); err == nil {
			r.resolve(b, ans, nil)
			return
		}
		if r.ctx.Err() != nil {
			return // aborted: the batch is already dropped
		}
		if ce, ok := IsComboError(err); ok && ce.Code == CodeInvalidArgument {
			if i, ok := refusedItem(ce.Message, len(b.items)); ok && len(b.items) > 1 {
				if !r.dropItem(b, i, fmt.Errorf("combo client: contribution %d refused, not retried: %w", b.items[i].Id, err)) {
					return // aborted: the batch is already dropped
				}
				resend = true
				continue
			}
			r.resolve(b, answers{}, fmt.Errorf("combo client: batch of %d refused, not retried: %w", len(b.items), err))
			return
		}
		if attempt >= retries {
			break
		}
		attempt++
	}
	r.resolve(b, answers{}, fmt.Errorf("%w: batch of %d failed after %d attempts: %w", ErrRetriesExhausted, len(b.items), attempt+1, err))
}

// jittered is backoff with equal jitter: a uniform wait in [backoff/2,
// backoff]. Callers whose batches failed together (a service blip) then
// spread their retries instead of all coming back at once, and each still
// waits at least half its backoff.
func jittered(backoff time.Duration, randN func(time.Duration) time.Duration) time.Duration {
	half := backoff / 2
	return half + randN(backoff-half+1) // +1: backoff itself is included
}

// refusedItem returns the index of the item an INVALID_ARGUMENT message
// names, if it names one below n: combo-service's validation errors start
// with the item's path, "contributions[3]" followed by "." or ":".
func refusedItem(msg string, n int) (int, bool) {
	rest, ok := strings.CutPrefix(msg, "contributions[")
	if !ok {
		return 0, false
	}
	end := strings.IndexByte(rest, ']')
	if end <= 0 || end+1 >= len(rest) || (rest[end+1] != '.' && rest[end+1] != ':') {
		return 0, false
	}
	digits := rest[:end]
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	i, err := strconv.Atoi(digits)
	if err != nil || i >= n {
		return 0, false
	}
	return i, true
}

// dropItem drops item i of b with err and keeps the rest in flight, unless
// an abort already dropped b. The rest goes into a new slice: an RPC its ctx
// abandoned may still be reading the old one.
func (r *Reporter) dropItem(b *batch, i int, err error) bool {
	r.mu.Lock()
	if b.resolved {
		r.mu.Unlock()
		return false
	}
	item := b.items[i]
	// New slices, not the old ones shifted: an abandoned RPC's encoder
	// may still read the old items (see drop).
	b.items = slices.Concat(b.items[:i:i], b.items[i+1:])
	b.ats = slices.Concat(b.ats[:i:i], b.ats[i+1:])
	r.held--
	r.stats.Dropped++
	r.metrics.dropped.Inc() // under mu, with the stats: see resolve
	r.drops.Add(1)
	wake := r.releaseLocked(item) // its key may have no other item in b
	r.mu.Unlock()

	if wake {
		r.signal()
	}
	defer r.drops.Done()
	r.drop([]*combo.Contribution{item}, err)
	return true
}

// answers counts a sent batch's answers that are worth telling apart.
type answers struct{ duplicate, degraded uint64 }

func (r *Reporter) attempt(items []*combo.Contribution) (_ answers, err error) {
	// A BatchSender of the caller's that panics fails the attempt, retried
	// and in the end dropped like any other: the panic would otherwise
	// kill the caller's process, and every contribution queued with it.
	start := time.Now()
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %v", ErrSenderPanicked, p)
		}
		r.metrics.observeAttempt(time.Since(start), err, r.ctx.Err() != nil)
	}()
	ctx, cancel := context.WithTimeout(r.ctx, r.opts.RPCTimeout)
	defer cancel()
	// The ctx deadline alone is not enough: Kitex applies the shorter of it
	// and the client's own RPC timeout (1s from NewClient), so the call
	// option is what lets RPCTimeout exceed it.
	resp, err := r.sender.ReportContributions(ctx, &combo.ReportContributionsRequest{Contributions: items},
		callopt.WithRPCTimeout(r.opts.RPCTimeout))
	if err != nil {
		return answers{}, err
	}
	if resp == nil {
		return answers{}, fmt.Errorf("%w: nil response and nil error", ErrBadResponse)
	}
	if len(resp.Results) != len(items) {
		return answers{}, fmt.Errorf("%w: %d results for %d contributions", ErrBadResponse, len(resp.Results), len(items))
	}
	var a answers
	for _, res := range resp.Results {
		switch {
		case res == nil:
		case res.Duplicate:
			a.duplicate++
		case res.Degraded:
			a.degraded++
		}
	}
	return a, nil
}

// countRetry counts a retry of b unless it was already resolved by an abort.
func (r *Reporter) countRetry(b *batch) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if b.resolved {
		return false
	}
	r.stats.Retried += uint64(len(b.items))
	r.metrics.retried.Add(float64(len(b.items)))
	return true
}

// resolve counts b as sent (err == nil, with its answers) or dropped,
// unless an abort already dropped it, and hands a dropped batch to OnDrop.
func (r *Reporter) resolve(b *batch, ans answers, err error) {
	n := len(b.items)
	r.mu.Lock()
	if b.resolved {
		r.mu.Unlock()
		return
	}
	b.resolved = true
	delete(r.inflight, b)
	r.held -= n
	// The metrics change under mu too, with the stats: a reader that sees
	// an outcome in Stats() (a health check, a test) then sees it in the
	// metrics; counted after Unlock, a scrape could lag Stats, and a Close
	// that gave up could return before the count landed.
	if err == nil {
		r.stats.Sent += uint64(n)
		r.stats.Duplicate += ans.duplicate
		r.stats.Degraded += ans.degraded
		r.metrics.sent.Add(float64(n))
		r.metrics.duplicate.Add(float64(ans.duplicate))
		r.metrics.degraded.Add(float64(ans.degraded))
	} else {
		r.stats.Dropped += uint64(n)
		r.metrics.dropped.Add(float64(n))
		r.drops.Add(1)
	}
	wake := r.releaseLocked(b.items...)
	r.mu.Unlock()

	if wake {
		r.signal()
	}

	if err == nil {
		return
	}
	defer r.drops.Done()
	r.drop(b.items, err)
}
