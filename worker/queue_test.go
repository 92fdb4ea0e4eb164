package worker

import (
	"testing"
	"time"

	"github.com/combo-service/combo-service/repo"
)

func item(id string, due time.Time) dueItem {
	return dueItem{w: repo.Window{ID: id}, due: due.UnixMilli()}
}

func TestDueQueueOrdersAndHoldsOnce(t *testing.T) {
	q := newDueQueue()
	t0 := time.Now()
	if n := q.push(item("3-0", t0.Add(3*time.Second)), item("1-0", t0.Add(time.Second)), item("2-0", t0.Add(2*time.Second))); n != 3 {
		t.Fatalf("added %d", n)
	}
	if n := q.push(item("1-0", t0)); n != 0 {
		t.Fatal("an id already held was added again")
	}
	if next, _ := q.next(); next != t0.Add(time.Second).UnixMilli() {
		t.Fatalf("next = %v", next)
	}
	got := q.popDue(t0.Add(2*time.Second).UnixMilli(), 10)
	if len(got) != 2 || got[0].w.ID != "1-0" || got[1].w.ID != "2-0" {
		t.Fatalf("popped %+v", got)
	}
	// Popped but not done: still held, so a re-read cannot add it twice.
	if n := q.push(item("1-0", t0)); n != 0 || q.holding() != 3 {
		t.Fatalf("popped item re-added (n=%d, holding %d)", n, q.holding())
	}
	q.done(got[0])
	q.requeue(got[1])
	if q.holding() != 2 {
		t.Fatalf("holding %d, want 2", q.holding())
	}
	if got := q.popDue(t0.Add(time.Hour).UnixMilli(), 1); len(got) != 1 || got[0].w.ID != "2-0" {
		t.Fatalf("batch limit / requeue: %+v", got)
	}
}

func TestDueQueueWakesOnEarlierItem(t *testing.T) {
	q := newDueQueue()
	t0 := time.Now()
	q.push(item("1-0", t0.Add(time.Hour)))
	<-q.wake // the first item always wakes
	q.push(item("2-0", t0.Add(2*time.Hour)))
	select {
	case <-q.wake:
		t.Fatal("a later item must not wake the flusher")
	default:
	}
	q.push(item("3-0", t0))
	select {
	case <-q.wake:
	default:
		t.Fatal("an earlier item must wake the flusher")
	}
}

func TestCompareIDs(t *testing.T) {
	cases := []struct {
		a, b string
		want int
	}{{"1-0", "1-0", 0}, {"1-1", "1-0", 1}, {"9-0", "10-0", -1}, {"1732950000000-5", "1732950000000-12", -1}}
	for _, c := range cases {
		if got := compareIDs(c.a, c.b); got != c.want {
			t.Errorf("compareIDs(%s, %s) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
	if maxID("", "5-0") != "5-0" || maxID("7-0", "5-0") != "7-0" {
		t.Fatal("maxID")
	}
}

func TestDueQueueTellsShardsApart(t *testing.T) {
	q := newDueQueue()
	t0 := time.Now()
	a, b := item("7-0", t0), item("7-0", t0)
	b.w.Shard = 1
	if n := q.push(a, b); n != 2 {
		t.Fatalf("added %d of two windows with one entry id on two shards", n)
	}
	got := q.popDue(t0.UnixMilli(), 10)
	q.done(got[0])
	if q.holding() != 1 {
		t.Fatalf("done on one shard's window forgot the other's (holding %d)", q.holding())
	}
}

// A window put back after a failed flush waits the due time retryLater
// set for it (a pause, longer after each error Redis answered). A re-read
// of this replica's own pending entries (after a failed read, as a
// failover fails reads and flushes alike) must not add it meanwhile with
// its own, earlier due time: it is held throughout, requeue included.
func TestRequeuedWindowIsNeverAddedAgainByAConcurrentReread(t *testing.T) {
	q := newDueQueue()
	const delayed = 1 << 40
	for i := range 20000 {
		q.push(item("1-0", time.UnixMilli(0)))
		got := q.popDue(1, 1)
		if len(got) != 1 {
			t.Fatalf("round %d: popped %d", i, len(got))
		}
		got[0].due = delayed
		reread := make(chan int)
		go func() { reread <- q.push(item("1-0", time.UnixMilli(0))) }()
		q.requeue(got...)
		added := <-reread
		if next, _ := q.next(); added != 0 || next != delayed || q.holding() != 1 {
			t.Fatalf("round %d: a re-read added the window while it was requeued (added %d, next due %d, holding %d), want it held with due %d",
				i, added, next, q.holding(), delayed)
		}
		q.done(q.popDue(delayed, 1)...)
	}
}
