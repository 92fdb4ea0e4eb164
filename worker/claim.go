package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/combo-service/combo-service/metrics"
	"github.com/combo-service/combo-service/repo"
)

// allShards, as claimLoop's shard: one loop scans every shard in turn.
const allShards = -1

// claimLoop scans shard's pending entries (every shard's, one after
// another, for allShards) for idle ones, again and again until ctx ends.
func (w *Worker) claimLoop(ctx context.Context, shard int) {
	every := max(w.cfg.ClaimIdle/2, 100*time.Millisecond)
	// An entry becomes claimable ClaimIdle after its delivery and is found
	// at the next scan: up to a period later. When window.stale leaves
	// less than that after ClaimIdle (a W near it; claim_idle's default is
	// then halfway between), scanning every ClaimIdle/2 dropped a dead
	// replica's windows stale that could have been published. Scan so that
	// half the room remains for the flush.
	if room := w.cfg.Stale - w.cfg.ClaimIdle; room > 0 {
		every = min(every, max(room/2, 10*time.Millisecond))
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if shard != allShards {
			w.claimOrReread(ctx, shard)
			continue
		}
		for s := 0; s < w.cfg.Shards && ctx.Err() == nil; s++ {
			w.claimOrReread(ctx, s)
		}
	}
}

// claimOrReread scans shard's pending entries for idle ones. When the scan
// fails, Redis may have claimed entries for this consumer and lost only
// the reply (a timeout, a reset), or a panic may have come between the
// claim and holding them: they are ours now, and no claim returns them
// before they idle ClaimIdle again, by when window.stale may have passed.
// So this consumer's own pending entries are read again, as the reader
// does after a failed read; those held already are skipped.
func (w *Worker) claimOrReread(ctx context.Context, shard int) {
	err := w.claimShard(ctx, shard)
	if err == nil || ctx.Err() != nil {
		return
	}
	if !errors.Is(err, errRecovered) {
		w.redisError(metrics.OpClaim, shard, err)
	}
	start := "0"
	for ctx.Err() == nil && w.Held() < w.cfg.MaxHeld {
		n, err := w.readOnce(ctx, shard, start, -1) // own entries: never blocks
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, errRecovered) {
				w.redisError(metrics.OpRead, shard, err)
			}
			return
		}
		w.redisOK(metrics.OpRead, shard)
		if n.last == "" {
			return
		}
		start = n.last
	}
}

// claimShard scans shard's pending entries once, taking over the idle ones.
func (w *Worker) claimShard(ctx context.Context, shard int) (err error) {
	defer func() {
		if p := recover(); p != nil {
			w.panicked(metrics.LoopClaim, loopPanic, p, zap.Int("shard", shard))
			err = fmt.Errorf("worker.claim: %w: %v", errRecovered, p)
		}
	}()
	cursor := "0-0"
	for ctx.Err() == nil {
		// Claim no more than MaxHeld allows: a dead replica may have left
		// far more pending than this one can hold. What is left stays for
		// a replica with room, or for a later round.
		room := w.cfg.MaxHeld - w.Held()
		if room <= 0 {
			return nil
		}
		var ws []repo.Window
		var bad []repo.BadEntry
		var deleted []string
		var next string
		// Read before the claim: the reader may prepare the shard while
		// the claim finds a new Redis's group missing and creates it.
		prepared := w.prepared[shard].Load()
		losses := w.losses[shard].Load()
		err := w.op(ctx, func(ctx context.Context) error {
			var err error
			ws, bad, deleted, next, err = w.store.Claim(ctx, shard, w.cfg.Consumer, w.cfg.ClaimIdle, cursor, min(w.cfg.ReadCount, room))
			return err
		})
		if errors.Is(err, repo.ErrGroupRecreated) {
			w.redisOK(metrics.OpClaim, shard) // Redis answered
			// Before the shard's reader prepared it, a missing group is
			// a new Redis's, not a loss.
			if prepared {
				w.groupLost(shard, losses, err)
			}
			return nil
		}
		if err != nil {
			return err
		}
		w.redisOK(metrics.OpClaim, shard)
		w.deletedEntries(shard, deleted)
		w.dropBad(ctx, shard, bad)
		if n := w.hold(shard, ws); n > 0 {
			w.metrics.Reclaimed.Add(float64(n))
			w.log.Info("took over idle windows", zap.Int("shard", shard), zap.Int("count", n))
		}
		if next == "" || next == "0-0" {
			return nil
		}
		cursor = next
	}
	return nil
}
