package window

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// benchRows is shaped like MergeLatest's input: one activity's latest rows,
// read newest first, from many users sending a handful of item types in
// bursts (a combo), so most keys have several windows and most windows
// several rows.
func benchRows(n int) []Row {
	rng := rand.New(rand.NewPCG(uint64(n), 1))
	types := []string{"rose", "烟花", "car", "rocket", "heart", "cake", "crown", "ship"}
	rows := make([]Row, 0, n)
	now := t0
	for len(rows) < n {
		user := rng.Int64N(int64(n/20+1)) + 1
		typ := rng.IntN(len(types))
		for j := rng.IntN(8) + 1; j > 0 && len(rows) < n; j-- {
			rows = append(rows, Row{
				ActivityID: 42,
				UserID:     user,
				StarID:     7,
				ItemID:     int64(typ) + 1,
				ItemType:   types[typ],
				ItemName:   "Red Rose",
				ItemIcon:   "https://cdn.example.com/icons/rose.png",
				Nickname:   fmt.Sprintf("user-%d", user),
				AvatarURL:  "https://cdn.example.com/avatars/u.png",
				Quantity:   int32(rng.IntN(5) + 1),
				CreatedAt:  now + int64(j)*(200+rng.Int64N(400)),
			})
		}
		now += 40
	}
	// Ids follow created_at, as database ids do; then newest first, as the
	// poll path reads them.
	slices.SortFunc(rows, func(a, b Row) int { return cmp.Compare(a.CreatedAt, b.CreatedAt) })
	for i := range rows {
		rows[i].ID = int64(i) + 1_000_000_000
	}
	slices.Reverse(rows)
	return rows
}

func BenchmarkMerge(b *testing.B) {
	for _, n := range []int{100, 1000, 10000} {
		rows := benchRows(n)
		b.Run(fmt.Sprintf("rows=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				Merge(rows, 3*time.Second)
			}
		})
	}
}
