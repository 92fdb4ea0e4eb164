package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// stalledPair is a loopback connection: the server's side, to be queued,
// and the client's, with a small receive buffer, so that a client reading
// nothing fills the sockets soon.
func stalledPair(t *testing.T) (server, client net.Conn) {
	t.Helper()
	client, server = tcpPair(t)
	if err := client.(*net.TCPConn).SetReadBuffer(64 << 10); err != nil {
		t.Fatal(err)
	}
	return server, client
}

// writeUntilCut writes chunk to q until a write fails, returning the error
// and how much was taken. A write that waited on the client would hang
// here: the test's deadline then names it.
func writeUntilCut(t *testing.T, q *outputQueuedConn, chunk []byte, max int, pause time.Duration) (int, error) {
	t.Helper()
	taken := 0
	for taken < max {
		n, err := q.Write(chunk)
		taken += n
		if err != nil {
			return taken, err
		}
		if pause > 0 {
			time.Sleep(pause)
		}
	}
	return taken, nil
}

// A client that reads nothing is cut once the hard limit is queued, and no
// write waits on it meanwhile.
func TestOutputQueuedConnCutsAClientPastTheHardLimit(t *testing.T) {
	server, client := stalledPair(t)
	var cutAt atomic.Int64
	q := newOutputQueuedConn(server, outputLimits{hard: 1 << 20, soft: 1 << 30, softFor: time.Hour},
		func(queued int) { cutAt.Store(int64(queued)) })
	defer q.Close()
	q.subscribed.Store(true)

	done := make(chan struct{})
	var taken int
	var err error
	go func() {
		defer close(done)
		taken, err = writeUntilCut(t, q, make([]byte, 16<<10), 1<<30, 0)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("a write waited on a client that reads nothing")
	}
	if !errors.Is(err, errOutputLimit) {
		t.Fatalf("after %d bytes: %v, want errOutputLimit", taken, err)
	}
	if got := cutAt.Load(); got < 1<<20 {
		t.Fatalf("cut with %d bytes queued, want at least the hard limit (1 MiB)", got)
	}
	// The kernel's buffers took some; the rest was queued, up to the limit
	// and one chunk past it.
	if taken > 32<<20 {
		t.Fatalf("took %d bytes from a client that reads nothing, with a 1 MiB limit", taken)
	}
	if _, err := q.Write([]byte("x")); !errors.Is(err, errOutputLimit) {
		t.Fatalf("a write after the cut: %v, want errOutputLimit", err)
	}
	// The client sees its connection end once it reads what was sent.
	client.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.Copy(io.Discard, client); err != nil && !isConnReset(err) {
		t.Fatalf("the cut client read: %v, want EOF or a reset", err)
	}
}

// A client over the soft limit for softFor is cut, though under the hard one.
func TestOutputQueuedConnCutsAClientOverTheSoftLimitForLong(t *testing.T) {
	server, _ := stalledPair(t)
	var cuts atomic.Int64
	q := newOutputQueuedConn(server, outputLimits{hard: 1 << 30, soft: 256 << 10, softFor: 200 * time.Millisecond},
		func(int) { cuts.Add(1) })
	defer q.Close()
	q.subscribed.Store(true)
	start := time.Now()
	var overAt time.Time
	for {
		if _, err := q.Write(make([]byte, 16<<10)); err != nil {
			if !errors.Is(err, errOutputLimit) {
				t.Fatalf("write: %v, want errOutputLimit", err)
			}
			break
		}
		if overAt.IsZero() && q.queuedBytes() > 256<<10 {
			overAt = time.Now()
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("not cut 10 s on, %d bytes queued over a 256 KiB soft limit", q.queuedBytes())
		}
		time.Sleep(time.Millisecond)
	}
	if overAt.IsZero() {
		t.Fatal("cut before more than the soft limit was queued")
	}
	if held := time.Since(overAt); held < 200*time.Millisecond {
		t.Fatalf("cut %v after going over the soft limit, want at least softFor (200ms)", held)
	}
	if cuts.Load() != 1 {
		t.Fatalf("cut reported %d times, want 1", cuts.Load())
	}
}

// A client that dips under the soft limit is not cut for having been over
// it before, and everything it is sent arrives, in order.
func TestOutputQueuedConnKeepsAClientThatReadsOn(t *testing.T) {
	server, client := stalledPair(t)
	q := newOutputQueuedConn(server, outputLimits{hard: 4 << 20, soft: 64 << 10, softFor: 300 * time.Millisecond},
		func(queued int) { t.Errorf("cut with %d bytes queued", queued) })
	q.subscribed.Store(true)
	var want bytes.Buffer
	got := make(chan []byte, 1)
	go func() {
		// Reads 32 KiB every 5 ms: slower than the writes come in bursts,
		// catching up between them.
		var b bytes.Buffer
		buf := make([]byte, 32<<10)
		for {
			client.SetReadDeadline(time.Now().Add(10 * time.Second))
			n, err := client.Read(buf)
			b.Write(buf[:n])
			if err != nil {
				got <- b.Bytes()
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	for burst := 0; burst < 20; burst++ {
		for i := 0; i < 100; i++ {
			line := fmt.Appendf(nil, "burst %d line %d %s\n", burst, i, bytes.Repeat([]byte("x"), 1000))
			want.Write(line)
			if _, err := q.Write(line); err != nil {
				t.Fatalf("burst %d line %d: %v", burst, i, err)
			}
		}
		for q.queuedBytes() > 0 {
			time.Sleep(time.Millisecond)
		}
	}
	if err := q.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case b := <-got:
		if !bytes.Equal(b, want.Bytes()) {
			t.Fatalf("the client read %d bytes, not the %d written in order", len(b), want.Len())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the client did not read to the end")
	}
}

// Close writes what is queued before closing (the +OK of a QUIT), and
// returns within closeFlushTimeout from a client that takes nothing.
func TestOutputQueuedConnCloseWritesWhatIsQueued(t *testing.T) {
	server, client := stalledPair(t)
	q := newOutputQueuedConn(server, pubsubOutputLimits, nil)
	if _, err := q.Write([]byte("+OK\r\n")); err != nil {
		t.Fatal(err)
	}
	if err := q.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	client.SetReadDeadline(time.Now().Add(10 * time.Second))
	b, err := io.ReadAll(client)
	if err != nil || string(b) != "+OK\r\n" {
		t.Fatalf("the client read %q, %v; want +OK then EOF", b, err)
	}

	stalled, _ := stalledPair(t)
	q = newOutputQueuedConn(stalled, pubsubOutputLimits, nil)
	if _, err := q.Write(make([]byte, 16<<20)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	q.Close()
	if took := time.Since(start); took > closeFlushTimeout+5*time.Second {
		t.Fatalf("Close took %v on a client that takes nothing, want about closeFlushTimeout (%v)", took, closeFlushTimeout)
	}
	if _, err := q.Write([]byte("x")); err == nil {
		t.Fatal("a write after Close was taken")
	}
}

func isConnReset(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) // not a read deadline's timeout: the socket was not closed
}

// A client that has not subscribed has no limit, as in Redis (normal 0 0
// 0): it is not cut however much it has not taken yet.
func TestOutputQueuedConnLimitsOnlyASubscriber(t *testing.T) {
	server, client := stalledPair(t)
	q := newOutputQueuedConn(server, outputLimits{hard: 1 << 20, soft: 1 << 20, softFor: time.Millisecond},
		func(queued int) { t.Errorf("cut with %d bytes queued", queued) })
	defer q.Close()
	for i := 0; i < 256; i++ { // 4 MiB, four times the hard limit
		if _, err := q.Write(make([]byte, 16<<10)); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	// The client subscribes, in a command split between two reads.
	go func() { _, _ = client.Write([]byte("*2\r\n$10\r\nPSUBSC")) }()
	buf := make([]byte, 64)
	if _, err := q.Read(buf); err != nil {
		t.Fatal(err)
	}
	if q.subscribed.Load() {
		t.Fatal("limited on half a command name")
	}
	go func() { _, _ = client.Write([]byte("RIBE\r\n$1\r\n*\r\n")) }()
	if _, err := q.Read(buf); err != nil {
		t.Fatal(err)
	}
	if !q.subscribed.Load() {
		t.Fatal("PSUBSCRIBE, read in two parts, not noted")
	}
}

// queuedBytes is what q holds not yet written to its socket.
func (q *outputQueuedConn) queuedBytes() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.queue) + q.inFlight
}
