package worker

import "testing"

// prevID and nextID bound the pages of the final read at shutdown: it
// re-reads this replica's own pending entries it does not hold from just
// before each one (XREADGROUP reads after the id given), and lists them
// page after page from just after the last one listed (XPENDING starts at
// the id given). An id one too far skips an entry, which then waits
// claim_idle for another replica; one not far enough lists the last one
// again, and a page of one never ends.
func TestPrevAndNextIDAreTheNeighbouringIDs(t *testing.T) {
	const maxSeq = "18446744073709551615"
	for _, c := range []struct{ id, prev, next string }{
		{"1732950000000-0", "1732949999999-" + maxSeq, "1732950000000-1"},
		{"1732950000000-7", "1732950000000-6", "1732950000000-8"},
		{"1732950000000-1", "1732950000000-0", "1732950000000-2"},
		{"1732950000000-" + maxSeq, "1732950000000-18446744073709551614", "1732950000001-0"},
		{"0-0", "0-0", "0-1"},
	} {
		if got := prevID(c.id); got != c.prev {
			t.Errorf("prevID(%s) = %s, want %s", c.id, got, c.prev)
		}
		if got := nextID(c.id); got != c.next {
			t.Errorf("nextID(%s) = %s, want %s", c.id, got, c.next)
		}
		if c.id != "0-0" && compareIDs(prevID(c.id), c.id) >= 0 {
			t.Errorf("prevID(%s) = %s is not before it", c.id, prevID(c.id))
		}
		if compareIDs(nextID(c.id), c.id) <= 0 {
			t.Errorf("nextID(%s) = %s is not after it", c.id, nextID(c.id))
		}
	}
}

// Stream ids' ms part is Redis's clock in ms, past 32 bits: ids a ms
// apart are ordered by it, whatever their sequence numbers.
func TestCompareIDsOfRealStreamIDs(t *testing.T) {
	cases := []struct {
		a, b string
		want int
	}{
		{"1732950000001-0", "1732950000000-9", 1},
		{"1732950000000-9", "1732950000001-0", -1},
		{"4294967296-0", "4294967295-5", 1}, // 2^32 ms and the ms before
	}
	for _, c := range cases {
		if got := compareIDs(c.a, c.b); got != c.want {
			t.Errorf("compareIDs(%s, %s) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
	if got := maxID("1732950000001-0", "1732950000000-9"); got != "1732950000001-0" {
		t.Errorf("maxID = %s, want 1732950000001-0", got)
	}
}
