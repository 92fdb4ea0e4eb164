package main

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/kitex_gen/combo/comboservice"
	"github.com/combo-service/combo-service/push"
	"github.com/combo-service/combo-service/validate"
)

// notDue is the windows not pushed by interruptedAt that were not late
// yet: opened less than the late bound before it (some may have been due,
// but a push may come up to that bound). None when not interrupted.
func (st *state) notDue(interruptedAt time.Time) map[int64]bool {
	nd := map[int64]bool{}
	if interruptedAt.IsZero() {
		return nd
	}
	for _, w := range st.wins {
		if len(w.pushes) == 0 && interruptedAt.Sub(w.firstAt) < st.tm.lateBound() {
			nd[w.id] = true
		}
	}
	return nd
}

// summary prints the totals and the checks; it reports whether all passed.
// After an interruption (interruptedAt not zero), the windows not late yet
// and their taps are left out of the checks.
func (st *state) summary(ctx context.Context, cli comboservice.Client, b *board, o options, elapsed time.Duration, activities []int64, interruptedAt time.Time) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	interrupted := !interruptedAt.IsZero()
	notDue := st.notDue(interruptedAt)
	var sentQty, pushedQty int64
	var counted, dups, degraded, failed, items, missing, twice, wrongQty, misrouted, badWins int
	var timed, early, slow, late, leftOut int
	for _, t := range st.taps {
		switch {
		case t.err != nil:
			failed++
		case t.dup:
			dups++
		case notDue[t.windowID]:
			leftOut++
		default:
			counted++
			sentQty += int64(t.c.Quantity)
			if t.degraded {
				degraded++
			}
		}
	}
	for _, w := range st.wins {
		if notDue[w.id] {
			continue
		}
		switch len(w.pushes) {
		case 0:
			missing++
		case 1:
		default:
			twice++
		}
		for _, r := range w.pushes {
			items++
			pushedQty += int64(r.Quantity)
		}
		if len(w.pushes) > 0 && int64(w.pushes[0].Quantity) != w.qty {
			wrongQty++
		}
		if w.misrouted > 0 {
			misrouted++
		}
		// A window can fail several ways: counted once among the bad.
		if len(w.pushes) != 1 || int64(w.pushes[0].Quantity) != w.qty || w.misrouted > 0 {
			badWins++
		}
		if len(w.pushes) > 0 && !w.degraded {
			timed++
			switch after := w.pushedAt.Sub(w.firstAt); {
			case st.tm.early(after):
				early++
			case st.tm.late(after):
				late++
			case st.tm.slow(after):
				slow++
			}
		}
	}

	mark := func(ok bool) string {
		if ok {
			return b.st.green("✓")
		}
		return b.st.red("✗")
	}
	line := func(label, value string) { b.plain("  %s %s", fit(label+" ", 30), value) }
	b.plain("")
	b.plain("%s", b.st.bold(fmt.Sprintf("Summary (%.1fs, W = %s, scenario %s)", elapsed.Seconds(), o.window, o.scenario)))
	if interrupted {
		b.plain("  %s", b.st.yellow(fmt.Sprintf("interrupted: %d windows (%d taps) opened less than W + grace + %s before, not pushed yet, "+
			"not late yet, and are left out of the checks", len(notDue), leftOut, lateSlack)))
	}
	notDueTaps := ""
	if interrupted {
		notDueTaps = fmt.Sprintf(", %d in windows not due", leftOut)
	}
	line("taps sent", fmt.Sprintf("%d (quantity %d counted): %d counted%s, %d duplicate, %d degraded, %d failed",
		len(st.taps), sentQty, counted, notDueTaps, dups, degraded, failed))
	line("feed items without merging", strconv.Itoa(counted))
	saved := ""
	if counted > 0 && items > 0 {
		saved = fmt.Sprintf(" (%.0f%% fewer)", 100*(1-float64(items)/float64(counted)))
	}
	line("feed items with merging", strconv.Itoa(items)+saved)
	conserved := sentQty == pushedQty
	line("conservation", fmt.Sprintf("quantity tapped %d = quantity pushed %d %s", sentQty, pushedQty, mark(conserved)))
	once := missing == 0 && twice == 0 && wrongQty == 0 && misrouted == 0
	checked := len(st.wins) - len(notDue)
	detail := fmt.Sprintf("%d/%d windows pushed exactly once, with the quantity the service reported, on their activity's channel",
		checked-badWins, checked)
	if !once {
		detail += fmt.Sprintf(" (%d never pushed, %d pushed more than once, %d with another quantity, %d on another activity's channel)",
			missing, twice, wrongQty, misrouted)
	}
	line("windows", detail+" "+mark(once))
	onTime := early == 0 && late == 0
	detail = fmt.Sprintf("%d/%d pushes between W and W + grace + %s after their window's first tap", timed-early-late, timed, lateSlack)
	if !onTime {
		detail += fmt.Sprintf(" (%d early, %d late)", early, late)
	}
	line("push timing", detail+" "+mark(onTime))
	b.plain("  %s", b.st.dim(fmt.Sprintf("%s by -window %s and -grace %s, as the demo was told: the service's own may differ",
		strings.Repeat(" ", 30), st.tm.w, st.tm.grace)))
	if slow > 0 {
		b.plain("  %s", b.st.yellow(fmt.Sprintf("%d pushes came later than W + grace + 100ms, the contract's bound under normal load: a busy machine?", slow)))
	}
	pollOK, pollDetail := st.comparePoll(ctx, cli, activities, notDue)
	line("poll path (MergeLatest)", pollDetail+" "+mark(pollOK))
	if st.ignored > 0 {
		line("ignored", fmt.Sprintf("%d pushes of windows this run did not open", st.ignored))
	}
	if degraded > 0 {
		b.plain("  %s", b.st.yellow(fmt.Sprintf("%d reports degraded: the service could not aggregate (Redis refusing writes?); "+
			"each was published on its own, so they are left out of the timing and poll checks", degraded)))
	}
	if failed > 0 {
		// Not "the service answered with an error": a tap sent to a
		// service that stopped, or never reached it, failed too; nor "not
		// counted": one whose answer timed out may have been.
		b.plain("  %s", b.st.red("some taps failed: the service refused them or did not answer (the left column says why)"))
	}
	if items == 0 && counted > 0 && !interrupted {
		b.plain("  %s", b.st.red(fmt.Sprintf("no push at all: is %s the Redis the service publishes on? "+
			"With the embedded Redis, pass -redis with the embedded_redis_addr the service logged.", o.redisAddr)))
	}
	return conserved && once && onTime && pollOK && failed == 0
}

// comparePoll asks MergeLatest to merge the counted taps, as the poll path
// would merge the DB rows, and compares its records with the pushes. The
// contract says they are identical when each key's reports arrive in
// created_at order, which the demo's sequential taps do. Degraded reports
// are left out on both sides: each was published on its own, by contract,
// and the poll path would merge it with its neighbours.
//
// The taps of windows in notDue are left out: their windows were not pushed.
// They are the newest of their keys (a later window of a key opens W after
// an earlier one), so the other windows merge alike without them.
type comboKey struct {
	user     int64
	itemType string
}

// pushedForm is the record a push carries for merged record r: every one
// of its twelve fields is compared.
func pushedForm(r *combo.ContributionRecord) push.Record {
	return push.Record{
		ID: r.Id, UserID: r.UserId, Nickname: r.Nickname, AvatarURL: r.AvatarUrl, StarID: r.StarId,
		ItemID: r.ItemId, ItemType: r.ItemType, ItemName: r.ItemName, ItemIcon: r.ItemIcon,
		Quantity: r.Quantity, ComboCount: r.ComboCount, CreatedAt: r.CreatedAt,
	}
}

func (st *state) comparePoll(ctx context.Context, cli comboservice.Client, activities []int64, notDue map[int64]bool) (bool, string) {
	pushed := map[int64]push.Record{}
	for _, w := range st.wins {
		if len(w.pushes) > 0 && !w.degraded {
			pushed[w.id] = w.pushes[0]
		}
	}
	same, total := 0, 0
	var diffs []string
	for _, act := range activities {
		// By combo key, in the order of each key's first tap: MergeLatest
		// takes at most validate.MaxMergeRecords rows a call, and windows
		// never span keys, so calls of whole keys merge as one call would.
		byKey := map[comboKey][]*combo.ContributionRecord{}
		var keys []comboKey
		for _, t := range st.taps {
			if t.err != nil || t.dup || t.degraded || t.c.ActivityId != act || notDue[t.windowID] {
				continue
			}
			c := t.c
			k := comboKey{c.UserId, c.ItemType}
			if byKey[k] == nil {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], &combo.ContributionRecord{
				Id: c.Id, UserId: c.UserId, Nickname: c.Nickname, AvatarUrl: c.AvatarUrl, StarId: c.StarId,
				ItemId: c.ItemId, ItemType: c.ItemType, ItemName: c.ItemName, ItemIcon: c.ItemIcon,
				Quantity: c.Quantity, ComboCount: c.Quantity, CreatedAt: c.CreatedAt,
			})
		}
		var rows []*combo.ContributionRecord
		merge := func() error {
			if len(rows) == 0 {
				return nil
			}
			resp, err := cli.MergeLatest(ctx, &combo.MergeLatestRequest{ActivityId: act, Records: rows})
			if err != nil {
				return fmt.Errorf("MergeLatest of %d rows of activity %d failed: %w", len(rows), act, err)
			}
			rows = rows[:0]
			for _, r := range resp.Records {
				total++
				p, ok := pushed[r.Id]
				if ok && p == pushedForm(r) {
					same++
					continue
				}
				diffs = append(diffs, fmt.Sprintf("id %d ×%d", r.Id, r.Quantity))
			}
			return nil
		}
		for _, k := range keys {
			kr := byKey[k]
			if len(kr) > validate.MaxMergeRecords {
				return false, fmt.Sprintf("not checked: %d rows of one combo key (activity %d, user %d, %s) exceed MergeLatest's %d",
					len(kr), act, k.user, k.itemType, validate.MaxMergeRecords)
			}
			if len(rows)+len(kr) > validate.MaxMergeRecords {
				if err := merge(); err != nil {
					return false, err.Error()
				}
			}
			rows = append(rows, kr...)
		}
		if err := merge(); err != nil {
			return false, err.Error()
		}
	}
	ok := same == total && total == len(pushed)
	detail := fmt.Sprintf("%d/%d merged records identical to the pushes", same, total)
	if total != len(pushed) {
		detail += fmt.Sprintf(" (%d windows were pushed)", len(pushed))
	}
	if len(diffs) > 0 {
		slices.SortFunc(diffs, func(a, b string) int { return cmp.Compare(a, b) })
		detail += "; differ: " + strings.Join(diffs[:min(len(diffs), 5)], ", ")
	}
	return ok, detail
}
