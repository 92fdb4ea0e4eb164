package client

import (
	"time"

	"github.com/combo-service/combo-service/kitex_gen/combo"
)

// signal wakes the dispatcher without blocking: one wake-up pending is
// enough, as it looks at everything queued when it runs.
func (r *Reporter) signal() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// dispatch is the single goroutine that cuts batches: it waits until
// BatchSize sendable contributions are queued (see Reporter.keys), the
// oldest of them has waited Linger, or the Reporter is closing with some
// sendable, then takes a send slot and only then cuts the batch, so
// contributions arriving while all slots are busy join it. With nothing
// sendable it sleeps until a Report or a resolve signals: never a busy loop
// while everything queued is blocked.
func (r *Reporter) dispatch() {
	defer close(r.done)
	defer r.sends.Wait()

	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		r.turns.Add(1)
		r.mu.Lock()
		if r.aborted {
			r.mu.Unlock()
			return
		}
		queued, n, closed := len(r.pending), len(r.pending)-r.blocked, r.closed.Load()
		var wait time.Duration
		if n > 0 && n < r.opts.BatchSize && !closed {
			wait = r.opts.Linger - time.Since(r.oldestSendableLocked())
		}
		r.mu.Unlock()

		if queued == 0 && closed {
			return // Report refuses new items; the sends are awaited by defer
		}
		if n == 0 || wait > 0 {
			// Nothing sendable (nothing queued, or all of it blocked until a
			// resolve frees its key and signals), or not due yet.
			var fire <-chan time.Time
			if n > 0 {
				timer.Reset(wait)
				fire = timer.C
			}
			select {
			case <-r.wake:
			case <-fire:
			case <-r.ctx.Done():
			}
			timer.Stop()
			continue
		}

		select {
		case r.slots <- struct{}{}:
		case <-r.ctx.Done():
			return
		}
		b := r.cut()
		if b == nil { // aborted meanwhile
			<-r.slots
			continue
		}
		r.sends.Add(1)
		go r.send(b)
	}
}

// cut moves up to BatchSize sendable contributions into a new in-flight
// batch.
func (r *Reporter) cut() *batch {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.aborted || len(r.pending) == r.blocked {
		return nil
	}
	b := &batch{}
	b.items, b.ats = r.cutLocked()
	r.inflight[b] = struct{}{}
	return b
}

// oldestHeldSeconds is the oldest-held gauge's value: the age of the
// oldest contribution held, 0 if none.
func (r *Reporter) oldestHeldSeconds() float64 {
	r.mu.Lock()
	defer r.mu.Unlock() // a panic must not leave the Reporter locked
	oldest := r.oldestHeldLocked()
	if oldest.IsZero() {
		return 0
	}
	return time.Since(oldest).Seconds()
}

// oldestHeldLocked is the enqueue time of the oldest contribution held,
// queued or in flight; zero if none. pending stays in enqueue order (a
// cut moves the blocked ones up, in order, and nothing is put back), so
// its first is its oldest, and so is a batch's first item.
func (r *Reporter) oldestHeldLocked() time.Time {
	var oldest time.Time
	if len(r.pending) > 0 {
		oldest = r.pending[0].at
	}
	for b := range r.inflight {
		if at := r.epoch.Add(b.ats[0]); oldest.IsZero() || at.Before(oldest) {
			oldest = at
		}
	}
	return oldest
}

// cutLocked takes up to BatchSize contributions out of pending, oldest
// first, passing over blocked ones, which keep their order; it then marks
// the taken keys busy, which blocks what is left of them in pending. A
// batch may hold several contributions of one key: the service counts a
// batch in order.
func (r *Reporter) cutLocked() (items []*combo.Contribution, ats []time.Duration) {
	n := min(len(r.pending)-r.blocked, r.opts.BatchSize)
	items, ats = make([]*combo.Contribution, 0, n), make([]time.Duration, 0, n)
	end := 0 // pending[:end] is what the scan passed: taken or blocked
	for ; end < len(r.pending) && len(items) < r.opts.BatchSize; end++ {
		p := &r.pending[end]
		if r.keys[p.key].inFlight > 0 { // busy before this cut: blocked
			continue
		}
		items, ats = append(items, p.c), append(ats, p.at.Sub(r.epoch))
		p.c = nil // taken
	}
	// Move the blocked ones of pending[:end] to its end, in order, and
	// reslice forward past the gap: that keeps memory bounded, since append
	// reallocates to about twice the live length (<= QueueSize) and the
	// old array is collected.
	w := end
	for i := end - 1; i >= 0; i-- {
		if r.pending[i].c != nil {
			w--
			r.pending[w] = r.pending[i]
		}
	}
	clear(r.pending[:w])
	r.pending = r.pending[w:]
	if len(r.pending) == 0 {
		r.pending = nil
	}
	for _, c := range items {
		k := r.keyOf(c)
		kc := r.keys[k]
		kc.queued--
		// Every item taken was of a key not busy before this cut: the first
		// of a key makes the rest of it in pending blocked, and a later one
		// in this batch was among them.
		if kc.inFlight == 0 {
			r.blocked += int(kc.queued)
		} else {
			r.blocked--
		}
		kc.inFlight++
		r.keys[k] = kc
	}
	return items, ats
}

// oldestSendableLocked is the enqueue time of the oldest sendable pending
// contribution (Linger runs from it); there must be one. It scans only the
// blocked ones ahead of it.
func (r *Reporter) oldestSendableLocked() time.Time {
	for i := range r.pending {
		if r.keys[r.pending[i].key].inFlight == 0 {
			return r.pending[i].at
		}
	}
	return time.Now() // not reached while blocked < len(pending)
}

// releaseLocked takes items off their keys' in-flight counts and reports
// whether that unblocked anything pending: the caller must then signal the
// dispatcher, since contributions that waited for the key may now go.
func (r *Reporter) releaseLocked(items ...*combo.Contribution) bool {
	unblocked := false
	for _, c := range items {
		k := r.keyOf(c)
		kc := r.keys[k]
		if kc.inFlight--; kc.inFlight == 0 && kc.queued > 0 {
			r.blocked -= int(kc.queued)
			unblocked = true
		}
		if kc.inFlight == 0 && kc.queued == 0 {
			delete(r.keys, k)
		} else {
			r.keys[k] = kc
		}
	}
	return unblocked
}
