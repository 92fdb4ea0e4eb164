package repo

import (
	"context"
	"errors"
	"slices"
	"sync"

	"github.com/combo-service/combo-service/kitex_gen/combo"
)

// reportSpanning runs a call whose reports span shards on pipelines of
// their own (coalescer.alone): one for the whole call when its shards are
// on one node, one per node otherwise (a Redis Cluster), run at once, each
// taking that node's slot alone. As one cluster pipeline the call held a
// slot on every node it touched until the slowest answered: a flood of
// batches spanning a stalled master took a live master's slots for
// redis.timeout each, and batches wholly on the live master waited them
// out and failed unsent. Per node, the live node's part is answered and
// its slot given back at once.
//
// The call answers when every part has. A part that failed fails the
// call, with the first failed part's error (in the nodes' order) and the
// windows every part opened (WindowsOpened), the failed part's own
// included when its reports aggregated but a degraded publish failed, as a
// cluster pipeline answered in part did; the caller's retry finds those
// reports duplicates.
// A part's degraded reports are published with that part, as its own call's
// would be, and remembered, so the retry answers them duplicate too; when
// another part fails the call, they count as its error's outcome in
// combo_reports_total, not as degraded. So do the sent parts' reports when
// the caller gave up while another part waited for its node's slot
// (ErrCallerGone, counted canceled: README says so). And one id under two
// combo keys on two nodes (a malformed batch), degraded in both, is
// published twice: results drops such repeats within one pipeline only.
// (An id's dedupe is per shard already.)
func (r *Repo) reportSpanning(ctx context.Context, cs []*combo.Contribution, shard int) ([]ReportResult, error) {
	t := r.slots.Load()
	if len(t.nodes) == 1 { // one Redis, or the nodes unknown
		return r.reports[shard].alone(ctx, cs)
	}
	var nodes []int
	var parts [][]int // indices into cs, by node
	for i, c := range cs {
		n := t.shardNode[r.keys.Shard(c.ActivityId, c.UserId, c.ItemType)]
		p := slices.Index(nodes, n)
		if p < 0 {
			p = len(nodes)
			nodes = append(nodes, n)
			parts = append(parts, nil)
		}
		parts[p] = append(parts[p], i)
	}
	if len(parts) == 1 {
		return r.reports[shard].alone(ctx, cs)
	}
	type answer struct {
		res []ReportResult
		err error
	}
	answers := make([]answer, len(parts))
	var wg sync.WaitGroup
	for p, idx := range parts {
		sub := make([]*combo.Contribution, len(idx))
		for k, i := range idx {
			sub[k] = cs[i]
		}
		first := r.keys.Shard(sub[0].ActivityId, sub[0].UserId, sub[0].ItemType)
		wg.Go(func() {
			answers[p].res, answers[p].err = r.reports[first].alone(ctx, sub)
		})
	}
	wg.Wait()

	res := make([]ReportResult, len(cs))
	var failed error
	opens := 0
	for _, p := range sortedParts(nodes) {
		a := answers[p]
		if a.err != nil {
			if failed == nil {
				failed = a.err
			}
			opens += WindowsOpened(a.err)
			continue
		}
		opens += opened(a.res)
		for k, i := range parts[p] {
			res[i] = a.res[k]
		}
	}
	if failed == nil {
		return res, nil
	}
	return nil, &spanningError{err: failed, opened: opens}
}

// sortedParts is the parts' indices in their nodes' order, so that which
// part's error a call answers does not depend on its reports' order.
func sortedParts(nodes []int) []int {
	idx := make([]int, len(nodes))
	for p := range idx {
		idx[p] = p
	}
	slices.SortFunc(idx, func(a, b int) int { return nodes[a] - nodes[b] })
	return idx
}

// spanningError fails a call spanning nodes one of whose parts failed
// (see reportSpanning): that part's error, with the windows every part
// opened all the same (WindowsOpened).
type spanningError struct {
	err    error
	opened int
}

func (e *spanningError) Error() string { return e.err.Error() }
func (e *spanningError) Unwrap() error { return e.err }

// spanningOpened is WindowsOpened's answer for a spanningError in err.
func spanningOpened(err error) (int, bool) {
	var se *spanningError
	if errors.As(err, &se) {
		return se.opened, true
	}
	return 0, false
}
