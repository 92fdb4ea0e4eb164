package client

import (
	"slices"

	"go.uber.org/zap"

	"github.com/combo-service/combo-service/kitex_gen/combo"
)

// dropLogIDs is the most ids one drop line names: 256 ids of 19 digits
// keep a line near 5 KB.
const dropLogIDs = 256

// drop logs items and hands OnDrop copies of them: the originals may still
// be read by an RPC that its ctx abandoned (Kitex returns at the deadline
// while its pooled goroutine goes on encoding the request), and the caller
// may keep, sort or change what it is given.
func (r *Reporter) drop(items []*combo.Contribution, err error) {
	// The ids, read before OnDrop gets the copies, which are the caller's
	// to change (or hand to another goroutine) from then on.
	ids := make([]int64, len(items))
	for i, c := range items {
		ids[i] = c.Id
	}
	if l := r.opts.Logger; l != nil {
		logDrop(l, ids, err)
	}
	if r.opts.OnDrop != nil {
		own := make([]*combo.Contribution, len(items))
		for i, c := range items {
			cp := *c // every field is a value
			own[i] = &cp
		}
		r.handToOnDrop(own, ids, err)
	}
}

// logDrop writes the drop of the contributions ids to l. Every id: a batch
// mixes the reports of concurrent callers, so the ids between its first
// and last are no range of the dropped ones, and without OnDrop these
// lines are all that names them. At most dropLogIDs a line: a batch of
// 1000 long ids made a line of about 20 KB, and container runtimes split
// lines over 16 KB, which a log shipper may then not parse as JSON.
func logDrop(l *zap.Logger, ids []int64, err error) {
	for start := 0; start < len(ids); start += dropLogIDs {
		chunk := slices.Clone(ids[start:min(start+dropLogIDs, len(ids))]) // a core may keep the field
		l.Error("combo client: contributions dropped",
			zap.Int("count", len(chunk)),
			zap.Int64("first_id", chunk[0]),
			zap.Int64("last_id", chunk[len(chunk)-1]),
			zap.Int64s("ids", chunk),
			zap.Error(err))
	}
}

// handToOnDrop calls OnDrop with items, its own copies of the contributions
// ids names. A panic in OnDrop is recovered, counted in Stats.OnDropPanics
// and logged (with the drop itself where no Logger logged it already, so
// the ids are not lost): it runs on the Reporter's goroutines, where it
// would otherwise kill the caller's process and lose every contribution
// still queued.
func (r *Reporter) handToOnDrop(items []*combo.Contribution, ids []int64, err error) {
	defer func() {
		p := recover()
		if p == nil {
			return
		}
		r.mu.Lock()
		r.stats.OnDropPanics++
		r.mu.Unlock()
		l := r.opts.Logger
		if l == nil {
			l = newDefaultDropLogger()
			logDrop(l, ids, err)
		}
		l.Error("combo client: OnDrop panicked; its contributions stay dropped (logged as dropped)",
			zap.Any("panic", p), zap.Int("count", len(ids)), zap.Stack("stack"))
	}()
	r.opts.OnDrop(items, err)
}
