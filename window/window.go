// Package window is the combo window rule: which contribution rows merge into
// one feed record.
//
// The rule (CONTRACT.md section 2): rows are grouped by the combo key
// (activity_id, user_id, item_type). Within one key, rows are taken in
// (created_at, id) order. The first row opens a window anchored at its
// created_at; each later row joins the open window while Joins holds for it
// (created_at < anchor + W, and the total stays within an i32); the first row
// for which it does not hold opens the next window, anchored at its own
// created_at. The anchor is the window's first row, never the previous row,
// so a steady stream of gifts cannot stretch one window without bound.
//
// A window becomes one record: id = the smallest id in it, created_at = the
// smallest created_at, quantity = the sum, and every other field from the
// smallest-id row.
//
// There is one implementation because there are two paths that must agree:
// the push path (a Lua script that accumulates reports as they arrive) and
// the poll path (MergeLatest, which merges rows read back from the database).
// When they disagreed in the source design, the frontend showed the same
// combo twice under different ids. The Lua script mirrors Joins; Merge is
// what the push path produces when reports of a key arrive in (created_at,
// id) order, so tests of the push path state their expectations with
// Merge. (A window full to int32's bound splits by arrival on the push
// path and by id here when rows share a millisecond: README's "i32 split".)
package window

import (
	"cmp"
	"math"
	"slices"
	"strings"
	"time"
)

// Row is one contribution row as the rule sees it.
type Row struct {
	ID         int64
	ActivityID int64
	UserID     int64
	StarID     int64
	ItemID     int64
	ItemType   string
	ItemName   string
	ItemIcon   string
	Nickname   string
	AvatarURL  string
	Quantity   int32
	CreatedAt  int64 // unix milliseconds
}

// Key is the combo key: (activity_id, user_id, item_type). Different
// activities never merge. It is item_type, not item_id, because the push path
// keys by item_type and both paths must group identically.
type Key struct {
	ActivityID, UserID int64
	ItemType           string
}

// Key returns the row's combo key.
func (r Row) Key() Key { return Key{ActivityID: r.ActivityID, UserID: r.UserID, ItemType: r.ItemType} }

// MaxQuantity is the largest total one window may hold (the record's quantity
// is an i32). A row that would push a window past it opens a new window
// instead, so a merged quantity is always exact.
const MaxQuantity = math.MaxInt32

// Joins reports whether a row with createdAt and quantity q joins an open
// window anchored at anchor (ms) whose total so far is total, for window size
// sizeMs (ms). It is the membership predicate; the push path's Lua script
// mirrors it exactly:
//
//	createdAt < anchor + sizeMs  &&  total + q <= MaxQuantity
//
// sizeMs <= 0 means "no merging": nothing joins. The sum is also kept at or
// above math.MinInt32, so a merged quantity fits an i32 whatever the input;
// that bound can only fail for a non-positive quantity, which the RPC refuses
// (quantity is 1..1000000), so for valid reports the Lua's two comparisons
// are the whole predicate. Both comparisons are written so that they cannot
// overflow int64, because Merge is pure and is fed arbitrary values.
func Joins(anchor, createdAt, sizeMs, total int64, q int32) bool {
	if sizeMs <= 0 {
		return false
	}
	// When anchor+sizeMs does not fit an int64 the limit lies beyond every
	// createdAt, so only the representable case can reject.
	if anchor <= math.MaxInt64-sizeMs && createdAt >= anchor+sizeMs {
		return false
	}
	s := int64(q)
	return total <= MaxQuantity-s && total >= math.MinInt32-s
}

// SizeMillis converts the window size to whole milliseconds, rounding up;
// the push path (repo) takes W from it too, so both paths cut a window at
// the same millisecond whatever the size.
// Rounding up is exact, not an approximation: created_at values are whole
// milliseconds, and for an integer gap d, d < size holds exactly when
// d < ceil(size in ms). A size <= 0 yields 0, which Joins reads as "no
// merging".
func SizeMillis(size time.Duration) int64 {
	if size <= 0 {
		return 0
	}
	ms := int64(size / time.Millisecond)
	if size%time.Millisecond != 0 {
		ms++
	}
	return ms
}

// win is one window while Merge builds its output. It is kept small so the
// final newest-first sort moves 32-byte values rather than whole Rows.
type win struct {
	createdAt int64 // the window's first (earliest) created_at
	id        int64 // the smallest id in the window
	rep       int   // index in rows of the smallest-id row
	qty       int32
}

// Merge applies the rule to rows (any order, any mix of keys) and returns the
// merged records, newest first by (CreatedAt desc, ID desc). It does not
// modify rows.
//
// Each returned Row is a window's merged record: ID = smallest id in the
// window, CreatedAt = smallest created_at, Quantity = sum of quantities, all
// other fields (StarID, ItemID, ItemName, ItemIcon, Nickname, AvatarURL,
// ItemType, UserID, ActivityID) from the row with the smallest id.
//
// Rows repeating an id count once: the first in (CreatedAt, ID) order is kept
// (ties broken on the remaining fields, so the choice never depends on input
// order). The id is the database row id, so a repeat is a re-delivered row,
// and counting it twice would inflate a combo.
//
// size <= 0 means no merging: every (distinct-id) row is its own window. A
// size below a millisecond behaves like 1 ms, since created_at has
// millisecond resolution (see SizeMillis).
//
// The result is never nil. Merge runs in O(n log n) with three allocations:
// an index slice, the window list and the output.
func Merge(rows []Row, size time.Duration) []Row {
	if len(rows) == 0 {
		return []Row{}
	}
	sizeMs := SizeMillis(size)

	// Sort indices, not rows: the input stays untouched and a swap moves one
	// word instead of a whole Row. (Sorting compact copies of the compared
	// fields, or numbering keys through a map first, was measured at 10000
	// rows and was no faster, at more memory or allocations.)
	idx := make([]int, len(rows))
	for i := range idx {
		idx[i] = i
	}

	// Drop repeated ids first. This must be global, not per key: a repeated
	// id with a different key would otherwise be counted in two combos.
	slices.SortFunc(idx, func(a, b int) int { return compareByID(&rows[a], &rows[b]) })
	kept := idx[:1]
	for _, i := range idx[1:] {
		if rows[i].ID != rows[kept[len(kept)-1]].ID {
			kept = append(kept, i)
		}
	}
	idx = kept

	// Group by key and order within a key by (CreatedAt, ID). Grouping by
	// key rather than by adjacency is what keeps another user's row, or an
	// input given newest first, from splitting or unbounding a combo. Ids
	// are unique now, so this order is total and the windows do not depend
	// on input order.
	slices.SortFunc(idx, func(a, b int) int { return compareByKeyTime(&rows[a], &rows[b]) })

	// Count first so the window list is allocated once at its exact size.
	wins := make([]win, 0, scan(rows, idx, sizeMs, nil))
	wins = wins[:scan(rows, idx, sizeMs, wins[:cap(wins)])]

	slices.SortFunc(wins, func(a, b win) int {
		if c := cmp.Compare(b.createdAt, a.createdAt); c != 0 {
			return c
		}
		return cmp.Compare(b.id, a.id)
	})

	out := make([]Row, 0, len(wins))
	for _, w := range wins {
		r := rows[w.rep]
		r.CreatedAt = w.createdAt
		r.Quantity = w.qty
		out = append(out, r)
	}
	return out
}

// scan walks idx (sorted by key, then (CreatedAt, ID)) and cuts it into
// windows. It returns the number of windows and, when dst is non-nil, writes
// them into dst, which must be long enough. Counting and filling share this
// one loop so they cannot disagree.
func scan(rows []Row, idx []int, sizeMs int64, dst []win) int {
	n := 0
	var cur win
	var prev *Row
	for _, i := range idx {
		r := &rows[i]
		if prev != nil && sameKey(prev, r) && Joins(cur.createdAt, r.CreatedAt, sizeMs, int64(cur.qty), r.Quantity) {
			cur.qty += r.Quantity
			if r.ID < cur.id {
				cur.id, cur.rep = r.ID, i
			}
		} else {
			if prev != nil {
				if dst != nil {
					dst[n] = cur
				}
				n++
			}
			cur = win{createdAt: r.CreatedAt, id: r.ID, rep: i, qty: r.Quantity}
		}
		prev = r
	}
	if prev != nil {
		if dst != nil {
			dst[n] = cur
		}
		n++
	}
	return n
}

func sameKey(a, b *Row) bool {
	return a.ActivityID == b.ActivityID && a.UserID == b.UserID && a.ItemType == b.ItemType
}

func compareKey(a, b *Row) int {
	if c := cmp.Compare(a.ActivityID, b.ActivityID); c != 0 {
		return c
	}
	if c := cmp.Compare(a.UserID, b.UserID); c != 0 {
		return c
	}
	return strings.Compare(a.ItemType, b.ItemType)
}

// compareByKeyTime orders by key, then (CreatedAt, ID): the order the rule
// walks a key's rows in.
func compareByKeyTime(a, b *Row) int {
	if c := compareKey(a, b); c != 0 {
		return c
	}
	if c := cmp.Compare(a.CreatedAt, b.CreatedAt); c != 0 {
		return c
	}
	return cmp.Compare(a.ID, b.ID)
}

// compareByID orders by ID, then CreatedAt, so the first row of an id's run
// is the one the rule keeps. Every other field breaks remaining ties: rows
// equal on all of them are interchangeable, so which one survives cannot
// change the result, and Merge stays independent of input order even for
// conflicting repeats.
func compareByID(a, b *Row) int {
	if c := cmp.Compare(a.ID, b.ID); c != 0 {
		return c
	}
	if c := cmp.Compare(a.CreatedAt, b.CreatedAt); c != 0 {
		return c
	}
	if c := compareKey(a, b); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Quantity, b.Quantity); c != 0 {
		return c
	}
	if c := cmp.Compare(a.StarID, b.StarID); c != 0 {
		return c
	}
	if c := cmp.Compare(a.ItemID, b.ItemID); c != 0 {
		return c
	}
	if c := strings.Compare(a.ItemName, b.ItemName); c != 0 {
		return c
	}
	if c := strings.Compare(a.ItemIcon, b.ItemIcon); c != 0 {
		return c
	}
	if c := strings.Compare(a.Nickname, b.Nickname); c != 0 {
		return c
	}
	return strings.Compare(a.AvatarURL, b.AvatarURL)
}
