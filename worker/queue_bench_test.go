package worker

import (
	"strconv"
	"testing"

	"github.com/combo-service/combo-service/repo"
)

// BenchmarkDueQueue measures the worker's per-window bookkeeping with
// held windows in the queue (up to the 200,000 cap): each op holds a new
// window (push), takes the earliest due one (popDue) and lets it go
// (done), as a flush of one window does.
//
//	go test -run '^$' -bench DueQueue -benchmem ./worker/
func BenchmarkDueQueue(b *testing.B) {
	for _, held := range []int{1_000, 100_000, 200_000} {
		b.Run("held="+strconv.Itoa(held), func(b *testing.B) {
			q := newDueQueue()
			ids := make([]string, held+b.N)
			for i := range ids {
				ids[i] = strconv.Itoa(i) + "-0"
			}
			for i := range held {
				q.push(dueItem{w: repo.Window{ID: ids[i]}, due: int64(i)})
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				q.push(dueItem{w: repo.Window{ID: ids[held+i]}, due: int64(held + i)})
				got := q.popDue(int64(held+i), 1)
				q.done(got...)
			}
		})
	}
}
