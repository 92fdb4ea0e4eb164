package worker

import (
	"container/heap"
	"sync"

	"github.com/combo-service/combo-service/repo"
)

// dueQueue holds the windows this replica has read, ordered by when they
// come due (Redis's clock, ms: a new estimate of it moves every deadline).
// The flusher sleeps until the earliest one instead of sleeping per entry,
// so one late window never holds up the others. A window is held at most
// once: one re-read or re-claimed while held is not flushed twice by this
// replica.
type dueQueue struct {
	mu   sync.Mutex
	h    dueHeap
	held map[windowRef]struct{}
	wake chan struct{} // poked when an earlier due time arrives, or the clock estimate moves
	// clock estimates the clock of the Redis node holding this shard:
	// on one Redis one estimate serves every shard; on a Redis Cluster
	// (Config.NodePerShard) each shard has its own, for each master has
	// its own clock, and one estimate for all would move with every
	// node's reply, making windows late on the nodes ahead and flushes
	// early on the ones behind.
	clock *redisClock
}

// windowRef names a window: its shard's stream and its entry id there. The
// id alone is not enough: every shard's stream numbers its own entries, so
// two shards that add an entry in the same millisecond both get "<ms>-0".
type windowRef struct {
	shard int
	id    string
}

func refOf(w repo.Window) windowRef { return windowRef{w.Shard, w.ID} }

type dueItem struct {
	w     repo.Window
	due   int64 // Redis ms
	fails int   // flushes of this window that Redis answered with an error
}

func newDueQueue() *dueQueue {
	return &dueQueue{held: map[windowRef]struct{}{}, wake: make(chan struct{}, 1)}
}

// push adds items not held yet and reports how many it added.
func (q *dueQueue) push(items ...dueItem) int {
	return q.add(items, false)
}

// add adds items, those held already too when again is set (requeue), and
// wakes the flusher if one comes before the earliest it waited for.
func (q *dueQueue) add(items []dueItem, again bool) int {
	q.mu.Lock()
	added := 0
	earliest := len(q.h) == 0
	var head int64
	if !earliest {
		head = q.h[0].due
	}
	for _, it := range items {
		if _, ok := q.held[refOf(it.w)]; ok && !again {
			continue
		}
		q.held[refOf(it.w)] = struct{}{}
		heap.Push(&q.h, it)
		added++
		if !earliest && it.due < head {
			earliest = true
		}
	}
	q.mu.Unlock()
	if added > 0 && earliest {
		q.poke()
	}
	return added
}

// poke wakes the flusher to look at the queue again: an earlier due time
// arrived, or the estimate of Redis's clock its timer was set from moved.
func (q *dueQueue) poke() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// requeue puts back items popped for a flush that did not retire them.
// They stay held throughout: let go between the two, a re-read of this
// replica's own pending entries (after a failed read, which a failover
// brings along with the failed flush) added a window again with its own
// due time, undoing the later one retryLater sets (a failed flush goes
// again after a pause, growing while Redis keeps answering with errors).
func (q *dueQueue) requeue(items ...dueItem) {
	q.add(items, true)
}

// popDue removes up to max items due at now (Redis ms). Popped items stay
// "held" until done or requeue, so a concurrent re-read cannot add them
// twice.
func (q *dueQueue) popDue(now int64, max int) []dueItem {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []dueItem
	for len(q.h) > 0 && len(out) < max && q.h[0].due <= now {
		out = append(out, heap.Pop(&q.h).(dueItem))
	}
	return out
}

// done forgets retired items.
func (q *dueQueue) done(items ...dueItem) {
	q.mu.Lock()
	for _, it := range items {
		delete(q.held, refOf(it.w))
	}
	q.mu.Unlock()
}

// holds reports whether ref is held: waiting, or popped and being flushed.
func (q *dueQueue) holds(ref windowRef) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	_, ok := q.held[ref]
	return ok
}

// next is the earliest due time (Redis ms), if any item waits.
func (q *dueQueue) next() (int64, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.h) == 0 {
		return 0, false
	}
	return q.h[0].due, true
}

// holding counts items waiting or being flushed.
func (q *dueQueue) holding() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.held)
}

type dueHeap []dueItem

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].due < h[j].due }
func (h dueHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *dueHeap) Push(x any)        { *h = append(*h, x.(dueItem)) }
func (h *dueHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	old[len(old)-1] = dueItem{}
	*h = old[:len(old)-1]
	return it
}
