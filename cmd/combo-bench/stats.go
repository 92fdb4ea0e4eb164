package main

import (
	"errors"
	"math"
	"slices"
	"time"
)

var errBadAnswer = errors.New("answer does not carry one result per contribution")

// durStats summarizes durations in milliseconds (JSON-friendly).
type durStats struct {
	N    int     `json:"n"`
	P50  float64 `json:"p50_ms"`
	P99  float64 `json:"p99_ms"`
	Max  float64 `json:"max_ms"`
	Mean float64 `json:"mean_ms"`
}

// summarize sorts ds in place and takes exact nearest-rank percentiles: the
// runs are at most a few million samples, so sorting is cheap and exact.
func summarize(ds []time.Duration) durStats {
	if len(ds) == 0 {
		return durStats{}
	}
	slices.Sort(ds)
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return durStats{
		N:    len(ds),
		P50:  ms(percentile(ds, 50)),
		P99:  ms(percentile(ds, 99)),
		Max:  ms(ds[len(ds)-1]),
		Mean: ms(sum / time.Duration(len(ds))),
	}
}

// percentile is the nearest-rank p-th percentile of sorted: the smallest
// sample with at least p% of the samples at or below it.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	rank = min(max(rank, 1), len(sorted))
	return sorted[rank-1]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// pushed is one push of the run, as the collector received it.
type pushed struct {
	Recv     time.Time
	WindowID int64
	Key      comboKey
	Quantity int64
}

// pushCheck is what the pushes say about the run's windows.
type pushCheck struct {
	WindowsExpected int64 `json:"windows_expected"` // opened + degraded answers
	PushesReceived  int   `json:"pushes_received"`
	WindowsPushed   int   `json:"windows_pushed"` // distinct known window ids pushed
	// WindowsMissing are the windows an answer opened (or degraded) whose
	// id was never pushed.
	WindowsMissing int64 `json:"windows_missing"`
	PushedTwice    int   `json:"pushed_twice"` // window ids pushed more than once
	// LatePushes arrived after the check, within -late-horizon of the last
	// run; the check is made again with them (amendLate), so a window
	// pushed again counts as pushed twice.
	LatePushes int `json:"late_pushes"`

	// What the check was made of, to make it again with late pushes.
	activity      int64
	rec           *recorder
	taken         []pushed
	window, grace time.Duration
	// EarlyPushes were received before W had passed since their window's
	// first RPC started (lag below -grace): published before the window
	// could have closed, which CONTRACT.md §3 forbids.
	EarlyPushes   int `json:"early_pushes"`
	UnknownPushes int `json:"unknown_pushes"`
	// WindowsMiscounted are pushes, on keys whose every RPC was answered,
	// of a window no answer announced, or of a window whose quantity is
	// not the total its answers gave (window_quantity): quantity counted in
	// another window than the caller was told, which the per-key sums
	// below cannot see.
	WindowsMiscounted int `json:"windows_miscounted"`
	// UnexpectedDuplicates are reports answered duplicate on keys whose
	// every RPC was answered: every id a run sends is new, so each is a
	// report the service dropped (see recorder.duplicated).
	UnexpectedDuplicates int64    `json:"unexpected_duplicates"`
	Lag                  durStats `json:"push_lag"`

	KeysChecked    int   `json:"keys_checked"`
	KeysMismatched int   `json:"keys_mismatched"` // pushed != reported, not explained by failed RPCs
	KeysUncertain  int   `json:"keys_uncertain"`  // had failed RPCs; pushed within [reported, reported+failed]
	QtyReported    int64 `json:"qty_reported"`
	QtyPushed      int64 `json:"qty_pushed"`
	Conserved      bool  `json:"conserved"`
}

// checkPushes matches the run's pushes to what the callers recorded:
// windows expected vs pushed, push lag (receive time minus the window's due
// time: its first report's RPC start + W + grace), and conservation (per
// combo key, the pushed quantities add up to the reported ones; per window,
// on keys without failed RPCs, its push carries the total its answers gave;
// no window id is pushed twice, none is pushed before W has passed).
func checkPushes(rec *recorder, pushes []pushed, window, grace time.Duration) pushCheck {
	lagBase := window + grace
	c := pushCheck{WindowsExpected: rec.opened + rec.degraded, PushesReceived: len(pushes)}
	seen := make(map[int64]bool, len(pushes))
	pushedQty := make(map[comboKey]int64)
	var lags []time.Duration
	for _, p := range pushes {
		pushedQty[p.Key] += p.Quantity
		if seen[p.WindowID] {
			c.PushedTwice++
			continue
		}
		seen[p.WindowID] = true
		// A key with a failed RPC may hold a window, or a larger total,
		// that no answer told of: only its key's sum is checked.
		certain := rec.uncertain[p.Key] == 0
		if want, ok := rec.windowQty[p.WindowID]; certain && (!ok || p.Quantity != want) {
			c.WindowsMiscounted++
		}
		if rec.degradedIDs[p.WindowID] {
			c.WindowsPushed++
			continue
		}
		start, ok := rec.windowStart[p.WindowID]
		if !ok {
			c.UnknownPushes++ // e.g. a window opened by a report whose RPC failed
			continue
		}
		c.WindowsPushed++
		if !rec.openedIDs[p.WindowID] {
			// Opened by a report whose RPC failed: start is a later
			// report's, so its lag would be too short (and could look
			// early).
			continue
		}
		lag := p.Recv.Sub(start.Add(lagBase))
		if lag < -grace {
			c.EarlyPushes++
		}
		lags = append(lags, lag)
	}
	// By id, not by count: a window known only from a join (its opening
	// RPC failed) and pushed must not stand in for one that is missing.
	for id := range rec.openedIDs {
		if !seen[id] {
			c.WindowsMissing++
		}
	}
	for id := range rec.degradedIDs {
		if !seen[id] {
			c.WindowsMissing++
		}
	}
	c.Lag = summarize(lags)

	keys := make(map[comboKey]bool)
	for k := range rec.reported {
		keys[k] = true
	}
	for k := range rec.uncertain {
		keys[k] = true
	}
	for k := range pushedQty {
		keys[k] = true
	}
	for k, n := range rec.duplicated {
		if rec.uncertain[k] == 0 {
			c.UnexpectedDuplicates += n
		}
	}
	for k := range keys {
		c.KeysChecked++
		want, got, extra := rec.reported[k], pushedQty[k], rec.uncertain[k]
		c.QtyReported += want
		c.QtyPushed += got
		switch {
		// A key with failed RPCs is uncertain even when its pushes match
		// what was acknowledged: with every RPC failed and nothing pushed,
		// they match at 0, and the run would look checked.
		case extra > 0 && got >= want && got <= want+extra:
			c.KeysUncertain++
		case got == want:
		default:
			c.KeysMismatched++
		}
	}
	// A run that opened no window checked nothing: not conserved, or a
	// run that sent nothing (all its RPCs failed, say) would pass.
	c.Conserved = c.WindowsExpected > 0 && c.KeysMismatched == 0 && c.PushedTwice == 0 && c.WindowsMissing == 0 && c.EarlyPushes == 0 &&
		c.WindowsMiscounted == 0 && c.UnexpectedDuplicates == 0
	return c
}

// runCheck is checkPushes of activity's run over the pushes taken at its
// check and those that came later (late), keeping what it was made of, so
// that amendLate can make it again with later pushes.
func runCheck(activity int64, rec *recorder, taken, late []pushed, window, grace time.Duration) pushCheck {
	all := taken
	if len(late) > 0 {
		all = append(append([]pushed(nil), taken...), late...)
	}
	pc := checkPushes(rec, all, window, grace)
	pc.LatePushes = len(late)
	pc.activity, pc.rec, pc.taken, pc.window, pc.grace = activity, rec, taken, window, grace
	return pc
}
