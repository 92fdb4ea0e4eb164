package window

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// refWindow is one window as the reference implementation assigns it.
type refWindow struct {
	members []Row // in (CreatedAt, ID) order
}

// reference is a deliberately naive restatement of CONTRACT.md section 2,
// sharing no code with Merge (no Joins, no slices.Sort, no index tricks), so
// that agreement between the two means something. It assumes unique ids and
// a size of whole milliseconds.
func reference(rows []Row, size time.Duration) []refWindow {
	w := size.Milliseconds()
	var keys []Key
	byKey := map[Key][]Row{}
	for _, r := range rows {
		k := r.Key()
		if _, ok := byKey[k]; !ok {
			keys = append(keys, k)
		}
		byKey[k] = append(byKey[k], r)
	}
	var out []refWindow
	for _, k := range keys {
		group := byKey[k]
		// Insertion sort by (CreatedAt, ID): O(n^2), obviously right.
		sorted := make([]Row, 0, len(group))
		for _, r := range group {
			i := len(sorted)
			for i > 0 && (sorted[i-1].CreatedAt > r.CreatedAt ||
				sorted[i-1].CreatedAt == r.CreatedAt && sorted[i-1].ID > r.ID) {
				i--
			}
			sorted = slices.Insert(sorted, i, r)
		}
		var cur *refWindow
		var total int64
		for _, r := range sorted {
			if cur != nil && w > 0 && r.CreatedAt-cur.members[0].CreatedAt < w &&
				total+int64(r.Quantity) <= math.MaxInt32 && total+int64(r.Quantity) >= math.MinInt32 {
				cur.members = append(cur.members, r)
				total += int64(r.Quantity)
				continue
			}
			out = append(out, refWindow{members: []Row{r}})
			cur = &out[len(out)-1]
			total = int64(r.Quantity)
		}
	}
	return out
}

// record is the merged record the contract defines for a window.
func (w refWindow) record() Row {
	rep := w.members[0]
	var sum int32
	for _, m := range w.members {
		if m.ID < rep.ID {
			rep = m
		}
		sum += m.Quantity
	}
	rep.CreatedAt = w.members[0].CreatedAt
	rep.Quantity = sum
	return rep
}

// referenceRecords returns the reference windows' records newest first.
func referenceRecords(wins []refWindow) []Row {
	recs := make([]Row, 0, len(wins))
	for _, w := range wins {
		r := w.record()
		i := len(recs)
		for i > 0 && (recs[i-1].CreatedAt < r.CreatedAt ||
			recs[i-1].CreatedAt == r.CreatedAt && recs[i-1].ID < r.ID) {
			i--
		}
		recs = slices.Insert(recs, i, r)
	}
	return recs
}

var propItemTypes = []string{"rose", "烟花", "a:b", "a", "{x}", "a b"}

// genRows makes a small, collision-heavy workload: few activities, users and
// item types, created_at over ~20 s, unique ids, some above 2^53.
func genRows(rng *rand.Rand) []Row {
	n := rng.IntN(80)
	rows := make([]Row, 0, n)
	seen := map[int64]bool{}
	for len(rows) < n {
		id := rng.Int64N(1_000_000) + 1
		if rng.IntN(4) == 0 {
			id = 1<<53 + rng.Int64N(1_000_000)
		}
		if seen[id] {
			continue
		}
		seen[id] = true
		r := row(id, rng.Int64N(2)+1, rng.Int64N(3)+1, propItemTypes[rng.IntN(len(propItemTypes))],
			int32(rng.IntN(5)+1), t0+rng.Int64N(20_000))
		r.ItemID = rng.Int64N(3) + 1
		rows = append(rows, r)
	}
	return rows
}

func shuffled(rng *rand.Rand, rows []Row) []Row {
	c := slices.Clone(rows)
	rng.Shuffle(len(c), func(i, j int) { c[i], c[j] = c[j], c[i] })
	return c
}

func TestMergeProperties(t *testing.T) {
	sizes := []time.Duration{3 * time.Second, time.Second, 7 * time.Second, time.Millisecond, 250 * time.Millisecond}
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
		rows := genRows(rng)
		size := sizes[int(seed)%len(sizes)]
		w := size.Milliseconds()
		label := fmt.Sprintf("seed %d (n=%d, W=%v)", seed, len(rows), size)

		got := Merge(rows, size)

		// (a) The result does not depend on input order.
		for s := range 4 {
			if again := Merge(shuffled(rng, rows), size); !slices.Equal(again, got) {
				t.Fatalf("%s: shuffle %d changes the result:\n got %+v\nwant %+v", label, s, again, got)
			}
		}

		// (b) Per key, quantity is conserved.
		in, out := map[Key]int64{}, map[Key]int64{}
		for _, r := range rows {
			in[r.Key()] += int64(r.Quantity)
		}
		for _, r := range got {
			out[r.Key()] += int64(r.Quantity)
		}
		if len(in) != len(out) {
			t.Fatalf("%s: %d keys in, %d keys out", label, len(in), len(out))
		}
		for k, q := range in {
			if out[k] != q {
				t.Fatalf("%s: key %+v: quantity %d in, %d out", label, k, q, out[k])
			}
		}

		// (c) Merge agrees with the independent reference, record for record:
		// same windows, smallest id, earliest created_at, display fields.
		ref := reference(rows, size)
		if want := referenceRecords(ref); !slices.Equal(got, want) {
			t.Fatalf("%s: Merge disagrees with the reference:\n got %+v\nwant %+v", label, got, want)
		}
		for _, win := range ref {
			first, last := win.members[0], win.members[len(win.members)-1]
			if last.CreatedAt-first.CreatedAt >= w {
				t.Fatalf("%s: window spans %d ms >= W: %+v", label, last.CreatedAt-first.CreatedAt, win.members)
			}
			for _, m := range win.members {
				if m.ID < win.record().ID {
					t.Fatalf("%s: record id %d is not the smallest (%d)", label, win.record().ID, m.ID)
				}
			}
		}

		// (d) Newest first, strictly (ids are unique).
		for i := 1; i < len(got); i++ {
			a, b := got[i-1], got[i]
			if a.CreatedAt < b.CreatedAt || a.CreatedAt == b.CreatedAt && a.ID <= b.ID {
				t.Fatalf("%s: records %d and %d out of order: %+v, %+v", label, i-1, i, a, b)
			}
		}

		// (e) Every input row is in exactly one window. Checked twice: in the
		// reference assignment, and without it, from Merge's output alone:
		// a key's windows are [created_at, created_at+W) intervals that
		// cannot overlap (the next one opens at or after anchor+W, since
		// these quantities never reach MaxQuantity), so exactly one record of
		// the row's key must cover it.
		count := map[int64]int{}
		for _, win := range ref {
			for _, m := range win.members {
				count[m.ID]++
			}
		}
		for _, r := range rows {
			if count[r.ID] != 1 {
				t.Fatalf("%s: row %d is in %d reference windows", label, r.ID, count[r.ID])
			}
			covering := 0
			for _, rec := range got {
				if rec.Key() == r.Key() && rec.CreatedAt <= r.CreatedAt && r.CreatedAt < rec.CreatedAt+w {
					covering++
				}
			}
			if covering != 1 {
				t.Fatalf("%s: row %+v is covered by %d records", label, r, covering)
			}
		}
	}
}

// fuzzItemTypes includes strings that only a string-concatenated key would
// confuse.
var fuzzItemTypes = []string{"rose", "a:b", "a", "b:", ":", "{a}", "烟花", "烟 花"}

// decodeRows turns fuzz bytes into rows, 6 bytes a row. Ids come from a small
// range so repeats (including conflicting ones) are common; quantities are
// mostly small but include the i32 extremes to exercise the overflow bound.
func decodeRows(data []byte) []Row {
	var rows []Row
	for len(data) >= 6 && len(rows) < 500 {
		b := data[:6]
		data = data[6:]
		id := int64(b[0]&0x3f) + 1
		if b[0]&0x40 != 0 {
			id += 1 << 53
		}
		var q int32
		switch b[5] {
		case 255:
			q = math.MaxInt32
		case 254:
			q = math.MaxInt32 - 1
		case 253:
			q = math.MinInt32
		case 252:
			q = -1
		default:
			q = int32(b[5]%5) + 1
		}
		r := row(id, int64(b[1]&1)+1, int64(b[1]>>1&3)+1, fuzzItemTypes[int(b[2])%len(fuzzItemTypes)],
			q, t0+int64(binary.LittleEndian.Uint16(b[3:5])))
		r.Nickname = fmt.Sprintf("nick-%d", b[5]) // lets repeats of an id differ in display fields
		rows = append(rows, r)
	}
	return rows
}

func FuzzMergeOrderIndependent(f *testing.F) {
	f.Add([]byte{}, uint64(1), int64(3000))
	f.Add([]byte{1, 0, 0, 0, 0, 1}, uint64(2), int64(3000))
	// Three rows of one key inside one window, one in the next.
	f.Add([]byte{
		1, 0, 0, 0x00, 0x00, 0,
		2, 0, 0, 0xe8, 0x03, 0,
		3, 0, 0, 0xb8, 0x0b, 0,
		4, 0, 0, 0xd0, 0x07, 0,
	}, uint64(3), int64(3000))
	// Conflicting repeats of id 5, different keys and nicknames.
	f.Add([]byte{
		5, 0, 0, 0x10, 0x00, 1,
		5, 2, 1, 0x10, 0x00, 2,
		5, 0, 2, 0x05, 0x00, 3,
		6, 0, 0, 0x20, 0x00, 4,
	}, uint64(4), int64(3000))
	// Quantity extremes and ids above 2^53.
	f.Add([]byte{
		0x41, 0, 0, 0, 0, 255,
		0x42, 0, 0, 1, 0, 1,
		0x43, 0, 0, 2, 0, 254,
		0x44, 0, 0, 3, 0, 253,
		0x45, 0, 0, 4, 0, 252,
	}, uint64(5), int64(3000))
	// No merging.
	f.Add([]byte{1, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 1}, uint64(6), int64(0))
	// A handful of random workloads.
	for s := range uint64(8) {
		rng := rand.New(rand.NewPCG(s, 42))
		data := make([]byte, 6*rng.IntN(60))
		for i := range data {
			data[i] = byte(rng.UintN(256))
		}
		f.Add(data, s, rng.Int64N(5000))
	}

	f.Fuzz(func(t *testing.T, data []byte, shuffleSeed uint64, sizeMs int64) {
		rows := decodeRows(data)
		size := time.Duration(sizeMs%100_000) * time.Millisecond
		before := slices.Clone(rows)
		got := Merge(rows, size)
		if !slices.Equal(rows, before) {
			t.Fatal("Merge modified its input")
		}

		rng := rand.New(rand.NewPCG(shuffleSeed, 7))
		rev := slices.Clone(rows)
		slices.Reverse(rev)
		for i, in := range [][]Row{rev, shuffled(rng, rows), shuffled(rng, rows)} {
			if again := Merge(in, size); !slices.Equal(again, got) {
				t.Fatalf("permutation %d changes the result:\n got %+v\nwant %+v", i, again, got)
			}
		}

		for i := 1; i < len(got); i++ {
			a, b := got[i-1], got[i]
			if a.CreatedAt < b.CreatedAt || a.CreatedAt == b.CreatedAt && a.ID <= b.ID {
				t.Fatalf("records %d and %d out of order: %+v, %+v", i-1, i, a, b)
			}
		}

		// Conservation over the rows the rule keeps: per id, the earliest
		// copy. When two earliest copies differ in key or quantity, which one
		// is kept is Merge's tie-break, not the contract's, so the check is
		// skipped for that input (and the reference comparison below also
		// when they differ only in display fields).
		kept := map[int64]Row{}
		var tie, tieCounts bool // earliest copies differ: anywhere / in key or quantity
		for _, r := range rows {
			k, ok := kept[r.ID]
			switch {
			case !ok || r.CreatedAt < k.CreatedAt:
				kept[r.ID] = r
			case r.CreatedAt == k.CreatedAt && r != k:
				tie = true
				tieCounts = tieCounts || r.Key() != k.Key() || r.Quantity != k.Quantity
			}
		}
		if tieCounts {
			return
		}
		in, out := map[Key]int64{}, map[Key]int64{}
		for _, r := range kept {
			in[r.Key()] += int64(r.Quantity)
		}
		for _, r := range got {
			out[r.Key()] += int64(r.Quantity)
		}
		if len(got) > len(kept) {
			t.Fatalf("%d records from %d distinct ids", len(got), len(kept))
		}
		for k, q := range in {
			if out[k] != q {
				t.Fatalf("key %+v: quantity %d in, %d out", k, q, out[k])
			}
		}
		if len(in) != len(out) {
			t.Fatalf("%d keys in, %d keys out", len(in), len(out))
		}

		// With the repeats resolved the reference applies too.
		if tie {
			return
		}
		uniq := make([]Row, 0, len(kept))
		for _, r := range kept {
			uniq = append(uniq, r)
		}
		if want := referenceRecords(reference(uniq, size)); !slices.Equal(got, want) {
			t.Fatalf("Merge disagrees with the reference:\n got %+v\nwant %+v", got, want)
		}
	})
}
