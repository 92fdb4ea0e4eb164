package window_test

// A reference model of CONTRACT.md §2, written from the contract's text alone,
// and a fuzz target that checks window.Merge against it.

import (
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/combo-service/combo-service/window"
)

// refRecord is one merged record as CONTRACT.md §2 defines it. Quantity is an
// int64: the contract says "the sum of quantities" and sets no bound on it.
type refRecord struct {
	Row      window.Row // id, created_at and "the other fields"
	Quantity int64
}

// refMerge: combo key (activity_id, user_id, item_type); the rows of one key in
// (created_at, id) order; the first opens a window anchored at its created_at,
// each later row with created_at < anchor + W joins, the first with
// created_at >= anchor + W opens the next one. Merged record: id = smallest id,
// created_at = smallest created_at, quantity = sum, the other fields from the
// row with the smallest id.
func refMerge(rows []window.Row, w int64) []refRecord {
	type key struct {
		a, u int64
		t    string
	}
	groups := map[key][]window.Row{}
	var order []key
	for _, r := range rows {
		k := key{r.ActivityID, r.UserID, r.ItemType}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], r)
	}
	var out []refRecord
	for _, k := range order {
		g := append([]window.Row(nil), groups[k]...)
		sort.SliceStable(g, func(i, j int) bool {
			if g[i].CreatedAt != g[j].CreatedAt {
				return g[i].CreatedAt < g[j].CreatedAt
			}
			return g[i].ID < g[j].ID
		})
		var cur []window.Row
		var anchor int64
		flush := func() {
			if len(cur) == 0 {
				return
			}
			rec := refRecord{Row: cur[0]}
			minID, minCA := cur[0].ID, cur[0].CreatedAt
			var sum int64
			for _, r := range cur {
				sum += int64(r.Quantity)
				if r.ID < minID {
					minID = r.ID
					rec.Row = r
				}
				if r.CreatedAt < minCA {
					minCA = r.CreatedAt
				}
			}
			rec.Row.ID = minID
			rec.Row.CreatedAt = minCA
			rec.Quantity = sum
			out = append(out, rec)
			cur = nil
		}
		for _, r := range g {
			// created_at < anchor + W, without int64 overflow: r.CreatedAt >= anchor.
			if len(cur) > 0 && uint64(r.CreatedAt-anchor) < uint64(w) {
				cur = append(cur, r)
				continue
			}
			flush()
			anchor = r.CreatedAt
			cur = []window.Row{r}
		}
		flush()
	}
	return out
}

func recString(r window.Row, q int64) string {
	return fmt.Sprintf("{id=%d act=%d user=%d type=%q star=%d item=%d name=%q icon=%q nick=%q av=%q q=%d at=%d}",
		r.ID, r.ActivityID, r.UserID, r.ItemType, r.StarID, r.ItemID, r.ItemName, r.ItemIcon, r.Nickname, r.AvatarURL, q, r.CreatedAt)
}

// decodeRows turns fuzz bytes into rows: 5 bytes a row. Small domains so that
// keys collide, windows touch their boundaries and ids tie.
func decodeRows(data []byte, big bool) []window.Row {
	types := []string{"rose", "car", "", "rose "}
	var rows []window.Row
	for i := 0; i+5 <= len(data) && len(rows) < 64; i += 5 {
		b := data[i : i+5]
		r := window.Row{
			ID:         int64(b[0]%16) + 1,
			ActivityID: int64(b[1]>>6) + 1,
			UserID:     int64((b[1]>>4)&3) + 1,
			ItemType:   types[b[1]&3],
			CreatedAt:  1_700_000_000_000 + int64(b[2])*250 + int64(b[3]&7),
			Quantity:   int32(b[4]%5) + 1,
		}
		if b[3]&0x80 != 0 {
			r.ID += 1000 * int64(i) // mostly unique ids
		}
		if big && b[3]&0x40 != 0 {
			r.Quantity = 1_000_000 - int32(b[4]%3)
		}
		if big && b[3]&0x20 != 0 {
			r.CreatedAt = 253402300799999 - int64(b[2])*250
		}
		r.StarID = int64(b[4] >> 4)
		r.ItemID = r.ID * 7
		r.Nickname = fmt.Sprintf("n%d", r.ID)
		r.ItemName = fmt.Sprintf("name%d", b[4]>>5)
		r.ItemIcon = fmt.Sprintf("icon%d", b[0]>>6)
		r.AvatarURL = fmt.Sprintf("av%d", b[3]>>3)
		rows = append(rows, r)
	}
	return rows
}

func FuzzMergeMatchesContract(f *testing.F) {
	f.Add([]byte{1, 0, 0, 0, 1, 2, 0, 12, 0, 1}, uint16(3000), false) // exactly anchor+W: new window
	f.Add([]byte{1, 0, 0, 0, 1, 2, 0, 11, 7, 1, 3, 0, 20, 0, 1}, uint16(3000), false)
	f.Add([]byte{5, 0, 0, 0x80, 1, 2, 0, 0, 0x80, 1}, uint16(1), false)
	f.Fuzz(func(t *testing.T, data []byte, sizeMs uint16, big bool) {
		w := int64(sizeMs%6000) + 1
		rows := decodeRows(data, big)
		// Ids are the DB row ids: unique. Keep the first of each.
		seen := map[int64]bool{}
		uniq := rows[:0]
		for _, r := range rows {
			if !seen[r.ID] {
				seen[r.ID] = true
				uniq = append(uniq, r)
			}
		}
		rows = uniq
		in := append([]window.Row(nil), rows...)
		got := window.Merge(in, time.Duration(w)*time.Millisecond)
		want := refMerge(rows, w)

		for i := range rows { // Merge must not change its input's rows
			found := false
			for _, r := range in {
				if r == rows[i] {
					found = true
				}
			}
			if !found {
				t.Fatalf("Merge rewrote its input: row %s gone", recString(rows[i], int64(rows[i].Quantity)))
			}
		}

		// MergeLatest returns Merge's order: newest first by created_at, then id.
		for i := 1; i < len(got); i++ {
			a, b := got[i-1], got[i]
			if a.CreatedAt < b.CreatedAt || (a.CreatedAt == b.CreatedAt && a.ID < b.ID) {
				t.Fatalf("not newest first at %d: %s before %s", i, recString(a, int64(a.Quantity)), recString(b, int64(b.Quantity)))
			}
		}

		var gs, ws []string
		for _, r := range got {
			gs = append(gs, recString(r, int64(r.Quantity)))
		}
		for _, r := range want {
			ws = append(ws, recString(r.Row, r.Quantity))
		}
		sort.Strings(gs)
		sort.Strings(ws)
		if fmt.Sprint(gs) != fmt.Sprint(ws) {
			t.Fatalf("W=%dms rows:\n%s\ngot:\n%s\nwant (contract):\n%s", w, dump(rows), join(gs), join(ws))
		}
	})
}

func dump(rows []window.Row) string {
	s := ""
	for _, r := range rows {
		s += "  " + recString(r, int64(r.Quantity)) + "\n"
	}
	return s
}

func join(ss []string) string {
	s := ""
	for _, x := range ss {
		s += "  " + x + "\n"
	}
	return s
}
