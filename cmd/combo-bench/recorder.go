package main

import (
	"time"

	"github.com/combo-service/combo-service/kitex_gen/combo"
)

// recorder is what one caller saw. Each caller owns one (no locks on the
// hot path); they are merged after the load stops.
type recorder struct {
	calls     int64
	latencies []time.Duration // one per RPC (a batch is one)

	sent       int64 // reports put on the wire
	acked      int64 // answered and counted (not duplicate)
	errors     int64 // reports whose RPC failed: counted or not, unknown
	duplicates int64
	degraded   int64
	opened     int64 // answers that opened a window: the windows to expect
	firstErr   error

	reported  map[comboKey]int64 // quantity the service acknowledged, per key
	uncertain map[comboKey]int64 // quantity of failed RPCs, per key
	// duplicated counts, per key, the reports answered duplicate. Every id
	// a run sends is new, so on a key without a failed RPC (an attempt
	// that may have been counted, then retried) each one is a report the
	// service dropped (neither counted nor pushed, which the per-key sums
	// cannot see) or, on a Cluster, counted and then answered for a
	// re-send go-redis made after a network error (the sums see that).
	duplicated map[comboKey]int64
	// windowStart maps a window id (the smallest id in it) to the earliest
	// RPC start of a report answered with that id: its first report's send
	// time when ids rise within a key, as each caller ensures.
	windowStart map[int64]time.Time
	// openedIDs are the windows an answer said it opened (its own id and
	// quantity): the windows that must be pushed, matched by id, and the
	// only ones whose windowStart is their first report's.
	openedIDs   map[int64]bool
	degradedIDs map[int64]bool // published on their own at once, no window
	// windowQty is each window's total as the answers told it: the largest
	// window_quantity answered with its id (a degraded report's own
	// quantity). Its push must carry exactly that.
	windowQty map[int64]int64
}

func newRecorder() *recorder {
	return &recorder{
		reported:    make(map[comboKey]int64),
		uncertain:   make(map[comboKey]int64),
		duplicated:  make(map[comboKey]int64),
		windowStart: make(map[int64]time.Time),
		openedIDs:   make(map[int64]bool),
		degradedIDs: make(map[int64]bool),
		windowQty:   make(map[int64]int64),
	}
}

// observe records one RPC carrying cs, started at start, answered with
// results (same order) or err.
func (r *recorder) observe(start time.Time, took time.Duration, cs []*combo.Contribution, results []*combo.ReportContributionResponse, err error) {
	r.calls++
	r.latencies = append(r.latencies, took)
	r.sent += int64(len(cs))
	if err == nil && len(results) != len(cs) {
		err = errBadAnswer
	}
	if err != nil {
		r.errors += int64(len(cs))
		if r.firstErr == nil {
			r.firstErr = err
		}
		for _, c := range cs {
			r.uncertain[keyOf(c)] += int64(c.Quantity)
		}
		return
	}
	for i, c := range cs {
		res := results[i]
		switch {
		case res.Duplicate:
			r.duplicates++
			r.duplicated[keyOf(c)]++
			continue
		case res.Degraded:
			r.degraded++
			r.degradedIDs[c.Id] = true
			r.windowQty[c.Id] = int64(c.Quantity)
		default:
			// The report script answers an opening report with its own
			// quantity; a joining one with the window's total, which is
			// larger (quantities are >= 1).
			if res.WindowQuantity == c.Quantity {
				r.opened++
				r.openedIDs[res.WindowId] = true
			}
			if t, ok := r.windowStart[res.WindowId]; !ok || start.Before(t) {
				r.windowStart[res.WindowId] = start
			}
			r.windowQty[res.WindowId] = max(r.windowQty[res.WindowId], int64(res.WindowQuantity))
		}
		r.acked++
		r.reported[keyOf(c)] += int64(c.Quantity)
	}
}

// merge folds o into r.
func (r *recorder) merge(o *recorder) {
	r.calls += o.calls
	r.latencies = append(r.latencies, o.latencies...)
	r.sent += o.sent
	r.acked += o.acked
	r.errors += o.errors
	r.duplicates += o.duplicates
	r.degraded += o.degraded
	r.opened += o.opened
	if r.firstErr == nil {
		r.firstErr = o.firstErr
	}
	for k, v := range o.reported {
		r.reported[k] += v
	}
	for k, v := range o.uncertain {
		r.uncertain[k] += v
	}
	for k, v := range o.duplicated {
		r.duplicated[k] += v
	}
	for id, t := range o.windowStart {
		if cur, ok := r.windowStart[id]; !ok || t.Before(cur) {
			r.windowStart[id] = t
		}
	}
	for id := range o.openedIDs {
		r.openedIDs[id] = true
	}
	for id := range o.degradedIDs {
		r.degradedIDs[id] = true
	}
	for id, q := range o.windowQty {
		r.windowQty[id] = max(r.windowQty[id], q)
	}
}

func mergeAll(rs []*recorder) *recorder {
	all := newRecorder()
	for _, r := range rs {
		all.merge(r)
	}
	return all
}
