package main

import (
	"bytes"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// outputLimits say when a client whose output is queued is cut: with hard
// bytes not yet taken, or more than soft for softFor.
type outputLimits struct {
	hard, soft int
	softFor    time.Duration
}

// pubsubOutputLimits are the embedded Redis's limits for a subscriber,
// Redis's own defaults (client-output-buffer-limit pubsub 32mb 8mb 60); as
// in Redis, other clients have none (normal 0 0 0), a pipeline's replies
// taken as slowly as the client reads them. miniredis writes a PUBLISH to
// each subscriber under its one global lock; written straight to the
// socket, a subscriber that stopped reading froze it (every report with
// it) once the socket's buffers filled. Queued, a write never waits on the
// client.
var pubsubOutputLimits = outputLimits{hard: 32 << 20, soft: 8 << 20, softFor: 60 * time.Second}

// closeFlushTimeout bounds how long a Close waits to write what is queued
// (the +OK of a QUIT) to a client that takes nothing.
const closeFlushTimeout = time.Second

var errOutputLimit = errors.New("embedded Redis: client output limit reached; connection cut")

// The queue is a list of chunks of outputChunk bytes (what a write has past
// that, a chunk of its own), so that a write copies only itself: in one
// growing slice, each growth copied all that was queued, under miniredis's
// lock (a PUBLISH to a subscriber 30 MB behind took up to 0.7 s). Up to
// spareChunks written are kept for the next writes, and the writer's lists
// of chunks only while they have room for at most keptListChunks.
const (
	outputChunk    = 16 << 10
	spareChunks    = 4
	keptListChunks = 64
)

// outputQueuedConn is a connection whose writes are queued and written to
// the socket by a goroutine of its own, in order. Once it has subscribed,
// past a limit it is cut: the socket is closed, so miniredis's reader of
// it ends and the client is let go (its subscriptions with it). cut, when
// set, hears of each cut with the bytes then queued.
type outputQueuedConn struct {
	net.Conn
	limits outputLimits
	cut    func(queued int)
	set    *outputQueues // nil: in none

	subscribed atomic.Bool // a SUBSCRIBE, PSUBSCRIBE or SSUBSCRIBE was read
	readTail   []byte      // the end of what was read, for a name split between reads (the reader's alone)

	mu        sync.Mutex
	wake      *sync.Cond
	queue     [][]byte  // written, not yet taken by the writer, in chunks
	queued    int       // bytes in queue
	spare     [][]byte  // chunks written, to be reused (never one the writer holds)
	inFlight  int       // taken by the writer, not yet written
	overSince time.Time // since when more than limits.soft is queued
	closing   bool      // Close was called: write what is queued, then close
	failed    error     // cut, or the socket refused a write: writes fail
	written   chan struct{}
	closeOnce sync.Once
}

func newOutputQueuedConn(c net.Conn, limits outputLimits, cut func(queued int)) *outputQueuedConn {
	q := &outputQueuedConn{Conn: c, limits: limits, cut: cut, written: make(chan struct{})}
	q.wake = sync.NewCond(&q.mu)
	go q.writeLoop()
	return q
}

// Read notes a subscribing command in what the client sends, from which
// on the limits apply: matched in the bytes, case folded, so a value
// holding the word may apply them early, which costs only what it did
// before the limits were for subscribers alone.
func (q *outputQueuedConn) Read(b []byte) (int, error) {
	n, err := q.Conn.Read(b)
	if n > 0 && !q.subscribed.Load() {
		seen := append(q.readTail, b[:n]...)
		if bytes.Contains(bytes.ToLower(seen), []byte("subscribe")) {
			q.subscribed.Store(true)
			q.readTail = nil
		} else {
			q.readTail = append(q.readTail[:0], seen[max(0, len(seen)-len("subscribe")+1):]...)
		}
	}
	return n, err
}

// Write queues b whole (a reply larger than the limit is still taken when
// nothing is queued before it: the limit is on a client falling behind,
// not on the size of what it asked for).
func (q *outputQueuedConn) Write(b []byte) (int, error) {
	q.mu.Lock()
	if q.failed != nil {
		q.mu.Unlock()
		return 0, q.failed
	}
	if q.closing {
		q.mu.Unlock()
		return 0, net.ErrClosed
	}
	queued := q.queued + q.inFlight
	if !q.subscribed.Load() {
		q.enqueue(b)
		q.wake.Broadcast()
		q.mu.Unlock()
		return len(b), nil
	}
	now := time.Now()
	if queued <= q.limits.soft {
		q.overSince = time.Time{}
	} else if q.overSince.IsZero() {
		q.overSince = now
	}
	if queued >= q.limits.hard || (!q.overSince.IsZero() && now.Sub(q.overSince) >= q.limits.softFor) {
		q.failed = errOutputLimit
		q.queue, q.queued = nil, 0
		q.wake.Broadcast()
		q.mu.Unlock()
		q.Conn.Close() // ends a write in flight and miniredis's reader
		if q.cut != nil {
			q.cut(queued)
		}
		return 0, errOutputLimit
	}
	q.enqueue(b)
	q.wake.Broadcast()
	q.mu.Unlock()
	return len(b), nil
}

// enqueue copies b (miniredis reuses the buffer it writes from) to the
// queue's end: what fits into the last chunk's room, the rest into a new
// chunk, so that it costs what b holds, however much is queued.
func (q *outputQueuedConn) enqueue(b []byte) {
	q.queued += len(b)
	if n := len(q.queue); n > 0 {
		last := q.queue[n-1]
		k := copy(last[len(last):cap(last)], b)
		q.queue[n-1], b = last[:len(last)+k], b[k:]
	}
	switch {
	case len(b) > outputChunk:
		q.queue = append(q.queue, bytes.Clone(b))
	case len(b) > 0:
		var c []byte
		if n := len(q.spare); n > 0 {
			c, q.spare = q.spare[n-1], q.spare[:n-1]
		} else {
			c = make([]byte, 0, outputChunk)
		}
		q.queue = append(q.queue, append(c, b...))
	}
}

// writeLoop writes what is queued, in order, until the connection fails or
// is closed with nothing left to write: all that is queued at once, its
// chunks in one writev.
func (q *outputQueuedConn) writeLoop() {
	defer close(q.written)
	var out [][]byte // the chunks taken
	var iov [][]byte // out to be written, as net.Buffers' WriteTo consumes it
	for {
		q.mu.Lock()
		for q.queued == 0 && !q.closing && q.failed == nil {
			q.wake.Wait()
		}
		if q.failed != nil || q.queued == 0 {
			q.mu.Unlock()
			return
		}
		out, q.queue = q.queue, out[:0]
		q.inFlight, q.queued = q.queued, 0
		q.mu.Unlock()

		iov = append(iov[:0], out...)
		bufs := net.Buffers(iov)
		_, err := bufs.WriteTo(q.Conn)

		q.mu.Lock()
		q.inFlight = 0
		if err != nil && q.failed == nil {
			q.failed = err
		}
		// Only now, written, are the chunks taken spares: one handed out
		// while written had later writes overwrite the bytes being sent.
		for _, c := range out {
			if cap(c) == outputChunk && len(q.spare) < spareChunks {
				q.spare = append(q.spare, c[:0])
			}
		}
		clear(out)
		q.mu.Unlock()
		// A slice header a chunk: a client that fell 256 MB behind (one
		// reading a pipeline's replies slowly has no limit) left lists of
		// 0.4 MB each, kept as long as the connection (the queue takes
		// out's array next).
		if cap(out) > keptListChunks || cap(iov) > keptListChunks {
			out, iov = nil, nil
		}
		if err != nil {
			q.Conn.Close()
			return
		}
	}
}

// Close writes what is queued (for up to closeFlushTimeout), then closes
// the socket. miniredis calls it after a QUIT's +OK, when its reader ends,
// and on stop (one connection after another: outputQueues.closeAll closes
// them all at once first).
func (q *outputQueuedConn) Close() error {
	var err error
	q.closeOnce.Do(func() {
		if q.set != nil {
			defer q.set.remove(q)
		}
		q.mu.Lock()
		q.closing = true
		q.wake.Broadcast()
		q.mu.Unlock()
		q.Conn.SetWriteDeadline(time.Now().Add(closeFlushTimeout))
		<-q.written
		err = q.Conn.Close()
	})
	return err
}

// outputQueues are the open outputQueuedConns of one embedded Redis.
type outputQueues struct {
	mu    sync.Mutex
	conns map[*outputQueuedConn]struct{}
}

func (s *outputQueues) add(q *outputQueuedConn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conns == nil {
		s.conns = map[*outputQueuedConn]struct{}{}
	}
	q.set = s
	s.conns[q] = struct{}{}
}

func (s *outputQueues) remove(q *outputQueuedConn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.conns, q)
}

// closeAll closes every connection at once, so that a stop with clients
// taking nothing waits closeFlushTimeout in all, not once for each.
func (s *outputQueues) closeAll() {
	s.mu.Lock()
	conns := make([]*outputQueuedConn, 0, len(s.conns))
	for q := range s.conns {
		conns = append(conns, q)
	}
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, q := range conns {
		wg.Go(func() { q.Close() })
	}
	wg.Wait()
}
