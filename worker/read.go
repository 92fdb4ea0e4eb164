package worker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/combo-service/combo-service/metrics"
	"github.com/combo-service/combo-service/repo"
)

// readLoop reads shard's stream as this replica's consumer until ctx ends:
// its own pending entries first, then new ones, holding each window read
// for its flusher; a failed read backs off and rereads its own pending.
func (w *Worker) readLoop(ctx context.Context, shard int) {
	start := "0" // own pending entries first: they survived our last run
	bo := newBackoff()
	for ctx.Err() == nil {
		if w.Held() >= w.cfg.MaxHeld {
			sleep(ctx, 50*time.Millisecond)
			continue
		}
		losses := w.losses[shard].Load()
		n, err := w.readOnce(ctx, shard, start, w.cfg.Block)
		if errors.Is(err, repo.ErrGroupRecreated) {
			w.groupLost(shard, losses, err) // recreated: read it from the start
			start = "0"
			// Redis answered and the group is there again: the next read
			// goes after the shortest wait, not after the backoff of an
			// outage that ended (up to 2 s, every window opened meanwhile
			// pushed that late). Still a wait, should the group go on
			// vanishing.
			bo.reset()
			bo.wait(ctx)
			continue
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if !errors.Is(err, errRecovered) {
				w.redisError(metrics.OpRead, shard, err)
			}
			// Redis may have delivered the entries and lost only the reply
			// (a timeout, a reset): they are ours now and ">" would never
			// return them again. Read our own pending entries first, as
			// after a restart; those we hold already are skipped.
			start = "0"
			bo.wait(ctx)
			continue
		}
		w.redisOK(metrics.OpRead, shard)
		bo.reset()
		if start != ">" {
			if n.last == "" {
				start = ">"
			} else {
				start = n.last
			}
		}
	}
}

type readResult struct {
	count int
	last  string // last entry id returned
}

// readOnce reads one batch and queues it; a panic on a bad entry is
// recovered and counted so the loop goes on.
func (w *Worker) readOnce(ctx context.Context, shard int, start string, block time.Duration) (res readResult, err error) {
	defer func() {
		if p := recover(); p != nil {
			w.panicked(metrics.LoopRead, loopPanic, p, zap.Int("shard", shard))
			err = fmt.Errorf("worker.read: %w: %v", errRecovered, p)
		}
	}()
	// New entries no more than MaxHeld leaves room for, as the claimer
	// takes: a full ReadCount at the cap went past it by as much per shard.
	// Our own pending entries come in full pages: those held already are
	// skipped, and pages of the room left could take a round trip each.
	count := w.cfg.ReadCount
	if start == ">" {
		count = max(min(count, w.cfg.MaxHeld-w.Held()), 1)
	}
	// The read may block for Block; its timeout must cover that.
	rctx, cancel := context.WithTimeout(ctx, w.cfg.OpTimeout+max(block, 0))
	defer cancel()
	ws, bad, deleted, err := w.store.Read(rctx, shard, w.cfg.Consumer, start, count, block)
	if err != nil {
		return res, err
	}
	w.dropBad(ctx, shard, bad)
	if len(deleted) > 0 {
		// Our own pending entries, deleted under us (found re-reading them
		// after a restart): lost windows, counted as the claimer counts
		// them. XREADGROUP, unlike XAUTOCLAIM, leaves them pending.
		w.deletedEntries(shard, deleted)
		// Not counted when the stop cut it short, as in dropBad: no
		// Redis failure.
		if err := w.op(ctx, func(ctx context.Context) error { return w.store.Drop(ctx, shard, deleted) }); err != nil && ctx.Err() == nil {
			w.oneOffError(metrics.OpDrop, shard, err)
		}
	}
	w.hold(shard, ws)
	res.count = len(ws) + len(bad) + len(deleted)
	for _, win := range ws {
		res.last = maxID(res.last, win.ID)
	}
	for _, b := range bad {
		res.last = maxID(res.last, b.ID)
	}
	for _, id := range deleted {
		res.last = maxID(res.last, id)
	}
	return res, nil
}

// hold queues windows read from one shard's stream.
func (w *Worker) hold(shard int, ws []repo.Window) int {
	if len(ws) == 0 {
		return 0
	}
	items := make([]dueItem, len(ws))
	for i, win := range ws {
		items[i] = dueItem{w: win, due: win.Due}
	}
	n := w.qs[shard].push(items...)
	w.setHeldGauge()
	return n
}

// badReasonsLogged bounds the reasons one drop line gives (a batch of
// entries of an incompatible version repeats one reason), and
// badReasonBytes each reason, which quotes a field another writer may have
// made as long as it liked: the line stays well under the 16 KB at which
// container runtimes split a line.
const (
	badReasonsLogged = 8
	badReasonBytes   = 256 // JSON may double it (a quoted field of quotes); with 512 ids the line stays near 13 KB
)

func (w *Worker) dropBad(ctx context.Context, shard int, bad []repo.BadEntry) {
	if len(bad) == 0 {
		return
	}
	ids := make([]string, len(bad))
	reasons := make([]string, 0, min(len(bad), badReasonsLogged))
	for i, b := range bad {
		ids[i] = b.ID
		if i < badReasonsLogged {
			reason := b.Err.Error()
			if len(reason) > badReasonBytes {
				reason = strings.ToValidUTF8(reason[:badReasonBytes], "") + "…"
			}
			reasons = append(reasons, reason)
		}
	}
	w.metrics.BadEntries.Add(float64(len(ids)))
	// The reasons quote what each entry held: once dropped, this line is
	// all that is left to tell a version skew from a foreign writer.
	w.log.Warn("dropping stream entries that cannot be flushed", zap.Int("shard", shard),
		zap.Strings("ids", ids), zap.Strings("reasons", reasons))
	if err := w.op(ctx, func(ctx context.Context) error { return w.store.Drop(ctx, shard, ids) }); err != nil && ctx.Err() == nil {
		// They stay pending; the claimer brings them back and we try again.
		w.oneOffError(metrics.OpDrop, shard, err)
	}
}

// deletedEntries counts and logs pending entries found deleted from the
// stream: their windows can no longer be published.
func (w *Worker) deletedEntries(shard int, ids []string) {
	if len(ids) == 0 {
		return
	}
	w.metrics.ClaimDeleted.Add(float64(len(ids)))
	w.log.Warn("pending entries were deleted from the stream before their windows were published",
		zap.Int("shard", shard), zap.Strings("ids", ids))
}
