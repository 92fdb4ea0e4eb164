package window

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"
)

// t0 is a realistic created_at (unix ms), so tests exercise real magnitudes.
const t0 int64 = 1732950000000

const sec int64 = 1000

// row builds a row whose display fields are derived from its id, so a test
// can tell which row a merged record took them from.
func row(id, activity, user int64, itemType string, qty int32, createdAt int64) Row {
	return Row{
		ID:         id,
		ActivityID: activity,
		UserID:     user,
		StarID:     id + 1000,
		ItemID:     id + 2000,
		ItemType:   itemType,
		ItemName:   fmt.Sprintf("name-%d", id),
		ItemIcon:   fmt.Sprintf("icon-%d", id),
		Nickname:   fmt.Sprintf("nick-%d", id),
		AvatarURL:  fmt.Sprintf("avatar-%d", id),
		Quantity:   qty,
		CreatedAt:  createdAt,
	}
}

// merged is the record expected for a window: the display fields of the
// smallest-id row rep, with the window's first created_at and total.
func merged(rep Row, createdAt int64, qty int32) Row {
	rep.CreatedAt = createdAt
	rep.Quantity = qty
	return rep
}

func TestMerge(t *testing.T) {
	const W = 3 * time.Second

	// Row 13: the smallest id is not the earliest row.
	late15 := row(15, 1, 1, "rose", 1, t0+500)
	late15.Nickname, late15.ItemName, late15.ItemIcon = "renamed", "Red Rose", "rose.png"

	// Row 15: same item_type, different item_id.
	itemA := row(1, 1, 1, "flower", 1, t0)
	itemB := row(2, 1, 1, "flower", 2, t0+100)
	itemB.ItemID = itemA.ItemID + 99
	// ...and different item_type, same item_id.
	sameItemOther := row(3, 1, 1, "car", 1, t0+200)
	sameItemOther.ItemID = itemA.ItemID

	const big = int64(1) << 53

	// Keys that a naive "activity:user:type" string would collide.
	colliders := []Row{
		row(1, 1, 12, "3", 1, t0),
		row(2, 11, 2, "3", 1, t0+1),
		row(3, 1, 1, "2:3", 1, t0+2),
		row(4, 1, 1, "a:b", 1, t0+3),
		row(5, 1, 1, "a", 1, t0+4),
		row(6, 1, 1, "b", 1, t0+5),
		row(7, 1, 1, "a:", 1, t0+6),
		row(8, 1, 1, ":b", 1, t0+7),
		row(9, 1, 1, "{a}", 1, t0+8),
		row(10, 1, 1, "{a", 1, t0+9),
		row(11, 1, 1, "a b", 1, t0+10),
		row(12, 1, 1, "ab", 1, t0+11),
		row(13, 1, 1, "烟花", 1, t0+12),
		row(14, 1, 1, "烟 花", 1, t0+13),
		row(15, 1, 1, "烟", 1, t0+14),
	}
	wantColliders := make([]Row, 0, len(colliders))
	for _, r := range slices.Backward(colliders) {
		wantColliders = append(wantColliders, r)
	}

	// Conflicting repeat of id 7: the (CreatedAt, ID)-first copy (key "b") wins.
	dupA := row(7, 1, 1, "a", 4, t0+500)
	dupB := row(7, 1, 1, "b", 2, t0+100)

	tests := []struct {
		name string
		rows []Row
		size time.Duration
		want []Row
	}{
		{
			name: "nil input",
			rows: nil,
			size: W,
			want: []Row{},
		},
		{
			name: "single row",
			rows: []Row{row(1, 1, 1, "rose", 3, t0)},
			size: W,
			want: []Row{row(1, 1, 1, "rose", 3, t0)},
		},
		{
			name: "three rows of one key within 1s merge",
			rows: []Row{
				row(12, 1, 1, "rose", 1, t0+900),
				row(10, 1, 1, "rose", 1, t0),
				row(11, 1, 1, "rose", 1, t0+400),
			},
			size: W,
			want: []Row{merged(row(10, 1, 1, "rose", 0, 0), t0, 3)},
		},
		{
			name: "three item types stay three records",
			rows: []Row{
				row(1, 1, 1, "rose", 1, t0),
				row(2, 1, 1, "car", 1, t0+100),
				row(3, 1, 1, "rocket", 1, t0+200),
			},
			size: W,
			want: []Row{
				row(3, 1, 1, "rocket", 1, t0+200),
				row(2, 1, 1, "car", 1, t0+100),
				row(1, 1, 1, "rose", 1, t0),
			},
		},
		{
			name: "window boundary t, t+1s, t+3s",
			rows: []Row{
				row(1, 1, 1, "rose", 1, t0),
				row(2, 1, 1, "rose", 1, t0+1*sec),
				row(3, 1, 1, "rose", 1, t0+3*sec),
			},
			size: W,
			want: []Row{
				row(3, 1, 1, "rose", 1, t0+3*sec),
				merged(row(1, 1, 1, "rose", 0, 0), t0, 2),
			},
		},
		{
			name: "anchor+W-1ms joins, anchor+W opens a new window",
			rows: []Row{
				row(1, 1, 1, "rose", 1, t0),
				row(2, 1, 1, "rose", 1, t0+3*sec-1),
				row(3, 1, 1, "rose", 1, t0+3*sec),
			},
			size: W,
			want: []Row{
				row(3, 1, 1, "rose", 1, t0+3*sec),
				merged(row(1, 1, 1, "rose", 0, 0), t0, 2),
			},
		},
		{
			name: "anchored at the first row, not chained",
			rows: []Row{
				row(1, 1, 1, "rose", 1, t0),
				row(2, 1, 1, "rose", 1, t0+2*sec),
				row(3, 1, 1, "rose", 1, t0+4*sec),
			},
			size: W,
			want: []Row{
				row(3, 1, 1, "rose", 1, t0+4*sec),
				merged(row(1, 1, 1, "rose", 0, 0), t0, 2),
			},
		},
		{
			name: "design note 11: newest-first input is still bounded by W",
			rows: []Row{
				row(5, 1, 1, "rose", 1, t0+8*sec),
				row(4, 1, 1, "rose", 1, t0+6*sec),
				row(3, 1, 1, "rose", 1, t0+4*sec),
				row(2, 1, 1, "rose", 1, t0+2*sec),
				row(1, 1, 1, "rose", 1, t0),
			},
			size: W,
			want: []Row{
				row(5, 1, 1, "rose", 1, t0+8*sec),
				merged(row(3, 1, 1, "rose", 0, 0), t0+4*sec, 2),
				merged(row(1, 1, 1, "rose", 0, 0), t0, 2),
			},
		},
		{
			name: "design note 12: another user's row in between does not split",
			rows: []Row{
				row(3, 1, 1, "rose", 1, t0+200),
				row(2, 1, 2, "rose", 1, t0+100),
				row(1, 1, 1, "rose", 1, t0),
			},
			size: W,
			want: []Row{
				row(2, 1, 2, "rose", 1, t0+100),
				merged(row(1, 1, 1, "rose", 0, 0), t0, 2),
			},
		},
		{
			name: "design note 13: smallest id and its display fields, earliest created_at",
			rows: []Row{
				row(20, 1, 1, "rose", 2, t0),
				late15,
				row(30, 1, 1, "rose", 4, t0+1000),
			},
			size: W,
			want: []Row{merged(late15, t0, 7)},
		},
		{
			name: "design note 14: interleaved keys, every window present, no holes",
			rows: []Row{
				row(1, 1, 1, "rose", 1, t0),
				row(2, 1, 2, "rose", 1, t0+10),
				row(3, 1, 1, "car", 1, t0+20),
				row(4, 1, 1, "rose", 1, t0+1*sec),
				row(5, 1, 2, "rose", 1, t0+3*sec+10),
				row(6, 1, 1, "car", 1, t0+5*sec),
				row(7, 1, 1, "rose", 1, t0+6*sec),
				row(8, 1, 2, "rose", 1, t0+4*sec),
			},
			size: W,
			want: []Row{
				row(7, 1, 1, "rose", 1, t0+6*sec),
				row(6, 1, 1, "car", 1, t0+5*sec),
				merged(row(5, 1, 2, "rose", 0, 0), t0+3*sec+10, 2),
				row(3, 1, 1, "car", 1, t0+20),
				row(2, 1, 2, "rose", 1, t0+10),
				merged(row(1, 1, 1, "rose", 0, 0), t0, 2),
			},
		},
		{
			name: "design note 15: grouped by item_type, not item_id",
			rows: []Row{itemA, itemB, sameItemOther},
			size: W,
			want: []Row{sameItemOther, merged(itemA, t0, 3)},
		},
		{
			name: "same user and item in two activities are two records",
			rows: []Row{
				row(1, 1, 1, "rose", 1, t0),
				row(2, 2, 1, "rose", 1, t0+100),
			},
			size: W,
			want: []Row{
				row(2, 2, 1, "rose", 1, t0+100),
				row(1, 1, 1, "rose", 1, t0),
			},
		},
		{
			name: "item_type with separators, braces, spaces and CJK never collide",
			rows: colliders,
			size: W,
			want: wantColliders,
		},
		{
			name: "ids and user ids beyond 2^53 stay exact",
			rows: []Row{
				row(big+3, 1, big+1, "rose", 1, t0),
				row(big+1, 1, big+1, "rose", 1, t0+100),
				row(big+2, 1, big+1, "rose", 1, t0+200),
				row(big+4, 1, big, "rose", 1, t0+300),
			},
			size: W,
			want: []Row{
				row(big+4, 1, big, "rose", 1, t0+300),
				merged(row(big+1, 1, big+1, "rose", 0, 0), t0, 3),
			},
		},
		{
			name: "a row that would overflow the quantity opens a new window",
			rows: []Row{
				row(1, 1, 1, "rose", MaxQuantity-10, t0),
				row(2, 1, 1, "rose", 10, t0+100), // exactly MaxQuantity: joins
				row(3, 1, 1, "rose", 1, t0+200),  // would overflow: new window
				row(4, 1, 1, "rose", 5, t0+300),  // joins the new window
			},
			size: W,
			want: []Row{
				merged(row(3, 1, 1, "rose", 0, 0), t0+200, 6),
				merged(row(1, 1, 1, "rose", 0, 0), t0, MaxQuantity),
			},
		},
		{
			// Rows of one created_at are taken in id order, as the push path
			// takes them only if they also arrive in id order (README: the
			// i32 split): where a window fills up, the smaller ids are in it
			// and the larger open the next one.
			name: "equal created_at: an overflow cuts the rows in id order",
			rows: []Row{
				row(3, 1, 1, "rose", 1, t0),
				row(2, 1, 1, "rose", 1, t0),
				row(1, 1, 1, "rose", MaxQuantity-1, t0),
			},
			size: W,
			want: []Row{
				merged(row(3, 1, 1, "rose", 0, 0), t0, 1),
				merged(row(1, 1, 1, "rose", 0, 0), t0, MaxQuantity),
			},
		},
		{
			name: "repeated ids count once",
			rows: []Row{
				row(1, 1, 1, "rose", 1, t0),
				row(1, 1, 1, "rose", 1, t0),
				row(2, 1, 1, "rose", 1, t0+100),
				row(2, 1, 1, "rose", 1, t0+100),
				row(2, 1, 1, "rose", 1, t0+100),
			},
			size: W,
			want: []Row{merged(row(1, 1, 1, "rose", 0, 0), t0, 2)},
		},
		{
			name: "conflicting repeat: the (created_at, id)-first copy is kept",
			rows: []Row{
				dupA,
				row(8, 1, 1, "a", 1, t0+600),
				dupB,
			},
			size: W,
			want: []Row{
				row(8, 1, 1, "a", 1, t0+600),
				dupB,
			},
		},
		{
			name: "newest first, equal created_at by id desc",
			rows: []Row{
				row(5, 1, 1, "rose", 1, t0),
				row(9, 1, 1, "car", 1, t0),
				row(7, 1, 1, "ship", 1, t0+1),
				row(1, 1, 1, "cake", 1, t0-1),
			},
			size: W,
			want: []Row{
				row(7, 1, 1, "ship", 1, t0+1),
				row(9, 1, 1, "car", 1, t0),
				row(5, 1, 1, "rose", 1, t0),
				row(1, 1, 1, "cake", 1, t0-1),
			},
		},
		{
			name: "size 0 means no merging, repeats still count once",
			rows: []Row{
				row(1, 1, 1, "rose", 1, t0),
				row(2, 1, 1, "rose", 1, t0),
				row(2, 1, 1, "rose", 1, t0),
			},
			size: 0,
			want: []Row{
				row(2, 1, 1, "rose", 1, t0),
				row(1, 1, 1, "rose", 1, t0),
			},
		},
		{
			name: "negative size means no merging",
			rows: []Row{
				row(1, 1, 1, "rose", 1, t0),
				row(2, 1, 1, "rose", 1, t0+1),
			},
			size: -time.Second,
			want: []Row{
				row(2, 1, 1, "rose", 1, t0+1),
				row(1, 1, 1, "rose", 1, t0),
			},
		},
		{
			name: "sub-millisecond size merges only equal milliseconds",
			rows: []Row{
				row(1, 1, 1, "rose", 1, t0),
				row(2, 1, 1, "rose", 1, t0),
				row(3, 1, 1, "rose", 1, t0+1),
			},
			size: 500 * time.Microsecond,
			want: []Row{
				row(3, 1, 1, "rose", 1, t0+1),
				merged(row(1, 1, 1, "rose", 0, 0), t0, 2),
			},
		},
		{
			name: "fractional-millisecond size rounds up exactly",
			rows: []Row{
				row(1, 1, 1, "rose", 1, t0),
				row(2, 1, 1, "rose", 1, t0+1),
				row(3, 1, 1, "rose", 1, t0+2),
			},
			size: 1500 * time.Microsecond, // gap 1 < 1.5 joins, gap 2 does not
			want: []Row{
				row(3, 1, 1, "rose", 1, t0+2),
				merged(row(1, 1, 1, "rose", 0, 0), t0, 2),
			},
		},
	}

	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Merge(tc.rows, tc.size)
			if len(got) != len(tc.want) {
				t.Fatalf("got %d records, want %d:\n got %+v\nwant %+v", len(got), len(tc.want), got, tc.want)
			}
			for i := range got {
				if got[i] == (Row{}) {
					t.Errorf("record %d is a zero Row (a hole)", i)
				}
				if got[i] != tc.want[i] {
					t.Errorf("record %d:\n got %+v\nwant %+v", i, got[i], tc.want[i])
				}
			}
			// The rule is order-independent, so the reversed input must agree.
			rev := slices.Clone(tc.rows)
			slices.Reverse(rev)
			if again := Merge(rev, tc.size); !slices.Equal(again, got) {
				t.Errorf("reversed input gives a different result:\n got %+v\nwant %+v", again, got)
			}
		})
	}
}

func TestMergeDoesNotModifyInput(t *testing.T) {
	rows := []Row{
		row(3, 1, 1, "rose", 1, t0+200),
		row(1, 1, 1, "rose", 1, t0),
		row(2, 1, 2, "rose", 1, t0+100),
		row(1, 1, 1, "rose", 1, t0),
		row(4, 1, 1, "rose", 1, t0+5*sec),
	}
	before := slices.Clone(rows)
	got := Merge(rows, 3*time.Second)
	if !slices.Equal(rows, before) {
		t.Fatalf("Merge modified its input:\n got %+v\nwant %+v", rows, before)
	}
	// The output must not share memory with the input either.
	for i := range got {
		got[i].Quantity = 999
	}
	if !slices.Equal(rows, before) {
		t.Fatalf("writing the output changed the input")
	}
}

func TestMergeEmptyIsNotNil(t *testing.T) {
	for _, in := range [][]Row{nil, {}} {
		if got := Merge(in, 3*time.Second); got == nil || len(got) != 0 {
			t.Errorf("Merge(%v) = %#v, want an empty non-nil slice", in, got)
		}
	}
}

func TestRowKey(t *testing.T) {
	r := row(1, 2, 3, "烟花", 1, t0)
	if got, want := r.Key(), (Key{ActivityID: 2, UserID: 3, ItemType: "烟花"}); got != want {
		t.Fatalf("Key() = %+v, want %+v", got, want)
	}
}

func TestJoins(t *testing.T) {
	const W = 3000
	tests := []struct {
		name                             string
		anchor, createdAt, sizeMs, total int64
		q                                int32
		want                             bool
	}{
		{"same instant", t0, t0, W, 1, 1, true},
		{"inside the window", t0, t0 + 1500, W, 1, 1, true},
		{"last millisecond", t0, t0 + W - 1, W, 1, 1, true},
		{"exactly anchor+W", t0, t0 + W, W, 1, 1, false},
		{"after the window", t0, t0 + 10*W, W, 1, 1, false},
		{"earlier than the anchor (late report on the push path)", t0, t0 - 500, W, 1, 1, true},
		{"total reaches MaxQuantity exactly", t0, t0, W, MaxQuantity - 5, 5, true},
		{"total would exceed MaxQuantity", t0, t0, W, MaxQuantity - 5, 6, false},
		{"total already at MaxQuantity", t0, t0, W, MaxQuantity, 1, false},
		// The bound written out: the push path's Lua compares with the
		// literal 2147483647, so MaxQuantity moving alone would split the
		// two paths while every case above, written with it, still passed.
		{"total reaches 2^31-1 exactly", t0, t0, W, 2147483646, 1, true},
		{"total would pass 2^31-1", t0, t0, W, 2147483647, 1, false},
		{"largest valid quantity", t0, t0, W, 1, 1000000, true},
		{"size 0: no merging", t0, t0, 0, 1, 1, false},
		{"size 0: a late row does not join either", t0, t0 - 500, 0, 1, 1, false},
		{"negative size: no merging", t0, t0, -W, 1, 1, false},
		{"anchor+W beyond int64 does not wrap", math.MaxInt64 - 10, math.MaxInt64, W, 1, 1, true},
		{"anchor+W exactly MaxInt64 still closes", math.MaxInt64 - W, math.MaxInt64, W, 1, 1, false},
		{"huge size does not wrap", t0, math.MaxInt64, math.MaxInt64, 1, 1, true},
		{"total would fall below MinInt32", t0, t0, W, math.MinInt32 + 2, -3, false},
		{"total stays at MinInt32", t0, t0, W, math.MinInt32 + 3, -3, true},
		{"extreme total does not wrap", t0, t0, W, math.MaxInt64, 1, false},
		{"extreme negative total does not wrap", t0, t0, W, math.MinInt64, -1, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Joins(tc.anchor, tc.createdAt, tc.sizeMs, tc.total, tc.q); got != tc.want {
				t.Fatalf("Joins(%d, %d, %d, %d, %d) = %v, want %v",
					tc.anchor, tc.createdAt, tc.sizeMs, tc.total, tc.q, got, tc.want)
			}
		})
	}
}

// Copies of one id tied on created_at that differ in one other field:
// which copy is kept must not depend on the input's order (README: "ties
// broken by the other fields in a fixed order, whatever the order of the
// rows"), field by field, so no tie-break of compareByID can go missing.
// The other cases' repeats differ in created_at, or in nothing.
func TestMergeTiedRepeatsDoNotDependOnInputOrder(t *testing.T) {
	base := row(5, 1, 1, "rose", 2, t0)
	for _, tc := range []struct {
		field  string
		change func(r *Row)
	}{
		{"item_type", func(r *Row) { r.ItemType = "car" }},
		{"user_id", func(r *Row) { r.UserID = 2 }},
		{"activity_id", func(r *Row) { r.ActivityID = 2 }},
		{"quantity", func(r *Row) { r.Quantity = 3 }},
		{"star_id", func(r *Row) { r.StarID++ }},
		{"item_id", func(r *Row) { r.ItemID++ }},
		{"item_name", func(r *Row) { r.ItemName = "renamed" }},
		{"item_icon", func(r *Row) { r.ItemIcon = "other.png" }},
		{"nickname", func(r *Row) { r.Nickname = "renamed" }},
		{"avatar_url", func(r *Row) { r.AvatarURL = "other.png" }},
	} {
		t.Run(tc.field, func(t *testing.T) {
			other := base
			tc.change(&other)
			a := Merge([]Row{base, other}, 3*time.Second)
			b := Merge([]Row{other, base}, 3*time.Second)
			if len(a) != 1 || !slices.Equal(a, b) {
				t.Fatalf("copies differing in %s: %+v, reversed %+v; want one record, the same", tc.field, a, b)
			}
		})
	}
}
