package window

import (
	"slices"
	"testing"
	"time"
)

// README "For the gateway", paging the poll: a page merged on its own
// re-anchors a key whose rows run less than W apart across its start, and
// then every record of that key in the page can differ from the full
// history's (what was pushed), the newest included; a page that starts at
// a row W or more after its key's previous row merges exactly as the full
// history from there.
func TestPageStartingAtAPauseMergesAsTheFullHistory(t *testing.T) {
	const w = 10 * time.Second
	var rows []Row
	at := int64(1_700_000_000_000)
	add := func(n int, gap int64) {
		for range n {
			rows = append(rows, Row{ID: int64(len(rows) + 1), ActivityID: 1, UserID: 7, ItemType: "rose", Quantity: 1, CreatedAt: at})
			at += gap
		}
	}
	add(12, 4_000) // a gift every 4 s: one run of windows
	at += 8_000    // the last of it 12 s before the next: a pause of more than W
	add(20, 4_000)
	full := Merge(rows, w)
	pause := 12 // rows[12] is W or more after rows[11]

	since := func(records []Row, from int64) []Row {
		var out []Row
		for _, r := range records {
			if r.CreatedAt >= from {
				out = append(out, r)
			}
		}
		return out
	}
	if got, want := Merge(rows[pause:], w), since(full, rows[pause].CreatedAt); !slices.Equal(got, want) {
		t.Errorf("a page from the row after a pause of W:\n got %+v\nwant %+v", got, want)
	}
	// A page from the middle of the second run, one row past a window's
	// anchor: every record of it differs from the full history's, and
	// dropping its oldest does not help.
	page := Merge(rows[pause+1:], w)
	want := since(full, rows[pause+1].CreatedAt)
	same := 0
	for _, r := range page[:len(page)-1] {
		if slices.Contains(want, r) {
			same++
		}
	}
	if same != 0 {
		t.Errorf("a page from inside a run: %d of its %d records (its oldest dropped) equal the full history's, want none: re-anchored", same, len(page)-1)
	}
}
