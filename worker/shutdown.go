package worker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/combo-service/combo-service/metrics"
	"github.com/combo-service/combo-service/repo"
)

// Shutdown stops taking windows, publishes the held ones as they come due
// and returns when none is held, or with an error when ctx ends first.
func (w *Worker) Shutdown(ctx context.Context) error {
	var err error
	w.shutdownOnce.Do(func() {
		if w.stopTaking == nil { // never started
			return
		}
		w.stopTaking()
		// A reader's blocking read (worker.block) is waited out, for the
		// final reads must not race it; go-redis does not cut it short.
		// Not past the drain's bound: what such a read still takes stays
		// pending, for another replica to claim, and the read ends with
		// the Redis client's Close.
		takersDone := make(chan struct{})
		go func() { w.takers.Wait(); close(takersDone) }()
		select {
		case <-takersDone:
		case <-ctx.Done():
		}
		// The RPC server has stopped; take what its last calls enqueued
		// so this replica's own windows go out before it exits, after our
		// own pending entries that we do not hold (a read cut off by
		// stopTaking, or one whose reply was lost).
		// A Redis that stalls or refuses now would leave windows of
		// acknowledged reports unread, for a replica that may not exist:
		// shards whose read failed are tried again, after the others (on a
		// cluster, a dead master must not keep the live ones unread), until
		// the drain's bound.
		todo := make([]int, w.cfg.Shards)
		for i := range todo {
			todo[i] = i
		}
		var readErr error
		b := newBackoff()
		for len(todo) > 0 && ctx.Err() == nil {
			var failed []int
			for _, shard := range todo {
				rerr := w.finalRead(ctx, shard)
				if rerr == nil {
					w.redisOK(metrics.OpFinalRead, shard)
				} else {
					// Neither a panic (counted as the read loop's) nor
					// the drain's own bound running out is Redis's.
					if !errors.Is(rerr, errRecovered) && ctx.Err() == nil {
						w.redisError(metrics.OpFinalRead, shard, rerr)
					}
					readErr = fmt.Errorf("final read of shard %d: %w", shard, rerr)
					failed = append(failed, shard)
				}
			}
			if todo = failed; len(todo) > 0 {
				b.wait(ctx)
			}
		}
		if len(todo) == 0 {
			readErr = nil
		} else if readErr == nil { // ctx had ended before any final read
			readErr = fmt.Errorf("final read of %d shards not begun: %w", len(todo), ctx.Err())
		}
		// Said here, not before Shutdown: the final reads add this
		// replica's last windows, and a count taken before them read 0
		// next to an error naming 25 windows still held.
		if readErr != nil {
			w.log.Warn("final read failed; publishing the windows held, the rest left pending for another replica",
				zap.Int("held", w.Held()), zap.Int("shards_unread", len(todo)), zap.Error(readErr))
		} else {
			w.log.Info("final read done; publishing held windows", zap.Int("held", w.Held()))
		}
		close(w.draining)
		select {
		case <-w.flushDone:
		case <-ctx.Done():
			w.stopFlush()
			<-w.flushDone
			// select picks at random when the flushers had finished too:
			// then nothing is held, and no flush was cut short.
			if n := w.Held(); n > 0 {
				err = fmt.Errorf("worker.Shutdown: %d windows still held, left pending for another replica: %w", n, ctx.Err())
			}
		}
		if readErr != nil { // ctx ended while the final read failed
			err = errors.Join(err, fmt.Errorf("worker.Shutdown: windows left unread for another replica: %w", readErr))
		}
		w.writeHeldAtExit(ctx)
	})
	return err
}

// writeHeldAtExit writes the recovery lines still held back once every
// loop has ended: the housekeeper, their writer, stopped with the takers,
// before the drain, whose flushes and final reads may hold more. The
// sampler lets a message through once a second, so it tries for a little
// over one, within the drain's bound.
func (w *Worker) writeHeldAtExit(ctx context.Context) {
	deadline := time.Now().Add(1100 * time.Millisecond)
	for {
		if !w.writeHeldRecoveries() || !time.Now().Before(deadline) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// finalRead takes what is left of shard for this replica at shutdown: its
// own pending entries that it does not hold, then new ones up to the
// newest entry in the stream when it began. This replica's RPCs have
// stopped, so every window they opened is at or before that entry; later
// ones are the other replicas' traffic, theirs to read: under their load a
// read that finds nothing new might never come, and the drain would run
// into its bound and leave every window held here to wait claim_idle.
// It stops at MaxHeld, as the reader does: the unread entries before that
// newest one are the other replicas' too, and with every replica at its
// cap they are a backlog that read here would take memory past the cap
// and, not due before the drain's bound, wait claim_idle pending here,
// where left unread any replica with room takes them at once.
func (w *Worker) finalRead(ctx context.Context, shard int) error {
	var last string
	if err := w.op(ctx, func(ctx context.Context) (err error) {
		defer w.recoverAs(metrics.LoopRead, &err, zap.Int("shard", shard))
		last, err = w.store.LastID(ctx, shard)
		return err
	}); err != nil {
		return err
	}
	if w.Held() >= w.cfg.MaxHeld {
		return nil
	}
	// Own pending entries first: each page from just before the next one
	// not held, where they can be listed (XREADGROUP reads own entries
	// after the id it is given), else all of them from the start; then new
	// ones.
	unheld, listed := w.unheldPending(ctx, shard)
	after := func(id string) string {
		if !listed {
			return id
		}
		i, _ := slices.BinarySearchFunc(unheld, id, compareIDs)
		for i < len(unheld) && compareIDs(unheld[i], id) <= 0 {
			i++
		}
		if i == len(unheld) {
			return ">"
		}
		return prevID(unheld[i])
	}
	start := after("0-0")
	for ctx.Err() == nil {
		if w.Held() >= w.cfg.MaxHeld {
			return nil
		}
		losses := w.losses[shard].Load()
		n, err := w.readOnce(ctx, shard, start, -1)
		if errors.Is(err, repo.ErrNoStream) {
			return nil // never written to, and Redis refuses to create it: nothing to read
		}
		if errors.Is(err, repo.ErrGroupRecreated) {
			// A shard whose reader never prepared it (Redis was down
			// since the start) finds a new Redis's group missing: no loss.
			if w.prepared[shard].Load() {
				w.groupLost(shard, losses, err)
			}
			start, listed = "0", false // the list is of a group now gone
			continue
		}
		if err != nil {
			return err
		}
		if start != ">" {
			if n.last == "" {
				start = ">"
			} else {
				start = after(n.last)
			}
			continue
		}
		// ">" reads in id order: past last, everything up to it was
		// delivered, to this replica or to another.
		if n.count == 0 || last == "" || compareIDs(n.last, last) >= 0 {
			return nil
		}
	}
	return ctx.Err()
}

// unheldPending lists, in id order, the entries pending for this replica
// in shard's stream that it does not hold (a read cut off by the stop, a
// lost reply, a window whose flush panicked), by their ids alone
// (XPENDING), so that the final read re-reads those, not every one:
// XREADGROUP re-delivers each entry it returns, its idle time back to 0,
// and windows the drain then could not publish (Redis refusing writes, or
// the drain's bound) would wait claim_idle from the shutdown, not from
// when they were read, before another replica took them; a replica killed
// outright left them better placed. ok is false if the list could not be
// read whole.
func (w *Worker) unheldPending(ctx context.Context, shard int) (ids []string, ok bool) {
	q := w.qs[shard]
	for start := "-"; ctx.Err() == nil; {
		var page []string
		if err := w.op(ctx, func(ctx context.Context) (err error) {
			defer w.recoverAs(metrics.LoopRead, &err, zap.Int("shard", shard))
			page, err = w.store.PendingIDs(ctx, shard, w.cfg.Consumer, start, w.cfg.ReadCount)
			return err
		}); err != nil {
			// Counted, as every other Redis failure here: the re-read from
			// the start that follows re-delivers every held window. Not a
			// missing group, which Redis answered: that re-read finds it
			// missing too and counts the loss.
			if !errors.Is(err, errRecovered) && !errors.Is(err, repo.ErrNoGroup) && ctx.Err() == nil {
				w.redisError(metrics.OpFinalRead, shard, err)
			}
			return nil, false
		}
		for _, id := range page {
			if !q.holds(windowRef{shard, id}) {
				ids = append(ids, id)
			}
		}
		if len(page) < w.cfg.ReadCount {
			return ids, true
		}
		start = nextID(page[len(page)-1])
	}
	return nil, false
}
