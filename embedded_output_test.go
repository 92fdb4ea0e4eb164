package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"regexp"
	"runtime"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/combo-service/combo-service/internal/testwait"
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
	for burst := range 20 {
		for i := range 100 {
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
	for i := range 256 { // 4 MiB, four times the hard limit
		if _, err := q.Write(make([]byte, 16<<10)); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	// The client subscribes, in a command split between two reads, the
	// first holding all but the name's last letter (mutant: a byte less
	// of it kept for the next read, the name never seen whole).
	go func() { _, _ = client.Write([]byte("*2\r\n$10\r\nPSUBSCRIB")) }()
	buf := make([]byte, 64)
	if _, err := q.Read(buf); err != nil {
		t.Fatal(err)
	}
	if q.subscribed.Load() {
		t.Fatal("limited on half a command name")
	}
	go func() { _, _ = client.Write([]byte("E\r\n$1\r\n*\r\n")) }()
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
	return q.queued + q.inFlight
}

// A subscribing command is noted in whatever case the client sends it:
// redis-cli sends it as typed, lower case in README's `psubscribe` line
// (mutant: matched in upper case alone, a suspended redis-cli subscriber
// was never limited, its output growing in the service's memory).
func TestOutputQueuedConnNotesASubscriptionInAnyCase(t *testing.T) {
	for _, name := range []string{"psubscribe", "SUBSCRIBE", "sSubscribe"} {
		t.Run(name, func(t *testing.T) {
			server, client := stalledPair(t)
			q := newOutputQueuedConn(server, pubsubOutputLimits, nil)
			defer q.Close()
			cmd := fmt.Sprintf("*2\r\n$%d\r\n%s\r\n$1\r\n*\r\n", len(name), name)
			if _, err := client.Write([]byte(cmd)); err != nil {
				t.Fatal(err)
			}
			if _, err := io.ReadFull(q, make([]byte, len(cmd))); err != nil {
				t.Fatal(err)
			}
			if !q.subscribed.Load() {
				t.Fatalf("%q read, not noted as a subscription", cmd)
			}
		})
	}
}

// A connection closed leaves its embedded Redis's set (mutant: kept, with
// its socket and its last write's buffer, up to 1 MiB, for every client
// ever connected, as long as the service runs).
func TestOutputQueuesForgetAClosedConnection(t *testing.T) {
	var s outputQueues
	server, _ := stalledPair(t)
	q := newOutputQueuedConn(server, pubsubOutputLimits, nil)
	s.add(q)
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.conns) != 0 {
		t.Fatalf("%d connections held after the only one closed, want none", len(s.conns))
	}
}

// A subscriber's limits are the ones README gives, Redis's own defaults
// (mutant: the soft limit's 60 s made 600, or its 8 MB 32, which the
// tests of a cut, each with limits of its own, do not see).
func TestEmbeddedSubscriberLimitsAreREADMEs(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("`client-output-buffer-limit pubsub (\\d+)mb (\\d+)mb (\\d+)`").FindSubmatch(readme)
	if m == nil {
		t.Fatal("README gives no `client-output-buffer-limit pubsub` for the embedded Redis")
	}
	n := func(b []byte) int { i, _ := strconv.Atoi(string(b)); return i }
	want := outputLimits{hard: n(m[1]) << 20, soft: n(m[2]) << 20, softFor: time.Duration(n(m[3])) * time.Second}
	if pubsubOutputLimits != want {
		t.Fatalf("pubsubOutputLimits %+v, want README's %+v", pubsubOutputLimits, want)
	}
}

// A client back under the soft limit starts its time over it anew when it
// goes over again: once over it for softFor in all, but never for long, a
// client reading on was cut at its next write (mutant: the time over it
// never reset, so that the first write, however little was queued,
// softFor after the client first went over it cut it).
func TestOutputQueuedConnForgetsATimeOverTheSoftLimit(t *testing.T) {
	server, client := stalledPair(t)
	const softFor = 100 * time.Millisecond
	q := newOutputQueuedConn(server, outputLimits{hard: 1 << 30, soft: 64 << 10, softFor: softFor},
		func(queued int) { t.Errorf("cut with %d bytes queued", queued) })
	defer q.Close()
	q.subscribed.Store(true)
	for q.queuedBytes() <= 64<<10 { // over it, the client reading nothing
		if _, err := q.Write(make([]byte, 16<<10)); err != nil {
			t.Fatal(err)
		}
	}
	// A write that finds it over starts its time over it.
	if _, err := q.Write(make([]byte, 16<<10)); err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = io.Copy(io.Discard, client) }() // then reading on
	testwait.For(t, "all that was queued written", func() bool { return q.queuedBytes() == 0 })
	time.Sleep(softFor) // what is tested: the time since it went over
	if _, err := q.Write([]byte("+OK\r\n")); err != nil {
		t.Fatalf("a write with nothing queued, softFor after the client was over the soft limit: %v", err)
	}
}

// What was written is kept for the next writes only up to 1 MiB: a
// connection that was once sent a large reply (a 4 MiB value; the
// service's own pooled connections to the embedded Redis live as long as
// it does), or fell behind by many chunks, does not hold them for good,
// nor a list of as many (mutants: every chunk kept, or every chunk of
// outputChunk bytes; the writer's lists kept whatever their size).
func TestOutputQueuedConnKeepsNoLargeBuffer(t *testing.T) {
	server, client := net.Pipe() // nothing written till the client reads
	q := newOutputQueuedConn(server, pubsubOutputLimits, nil)
	defer q.Close()
	if _, err := q.Write(make([]byte, 4<<20)); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, "the 4 MiB taken by the writer", func() bool {
		q.mu.Lock()
		defer q.mu.Unlock()
		return q.inFlight > 0
	})
	for range 256 { // 4 MiB more, in chunks, behind it
		if _, err := q.Write(make([]byte, outputChunk)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := q.Write(make([]byte, 16)); err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = io.Copy(io.Discard, client) }()
	testwait.For(t, "the writes written", func() bool { return q.queuedBytes() == 0 })
	// The writer's list of the chunks it took is the queue's at its next
	// take: one more write, and the queue is in the list of 257 if kept.
	if _, err := q.Write(make([]byte, 16)); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, "the last write written", func() bool { return q.queuedBytes() == 0 })
	q.mu.Lock()
	defer q.mu.Unlock()
	held := 0
	for _, c := range append(q.spare, q.queue...) {
		held += cap(c)
	}
	if held > 1<<20 {
		t.Fatalf("the queue holds %d bytes after its writes were written, want 1 MiB or less", held)
	}
	if c := cap(q.queue); c > keptListChunks {
		t.Fatalf("the queue's list has room for %d chunks after its writes were written, want %d at most", c, keptListChunks)
	}
}

// A chunk the writer holds is not reused before it is written: a
// subscriber behind on small PUBLISHes was sent later bytes in place of
// earlier ones (mutant: the chunks made spares when taken, not once
// written).
func TestOutputQueuedConnReusesNoChunkBeingWritten(t *testing.T) {
	server, client := net.Pipe() // nothing written till the client reads
	q := newOutputQueuedConn(server, pubsubOutputLimits, nil)
	defer q.Close()
	var want bytes.Buffer
	write := func(n int) {
		t.Helper()
		for range n { // 1 KiB writes, each of a byte of its own
			w := bytes.Repeat([]byte{byte(want.Len() >> 10)}, 1<<10)
			want.Write(w)
			if _, err := q.Write(w); err != nil {
				t.Fatal(err)
			}
		}
	}
	write(4 * outputChunk >> 10)
	testwait.For(t, "chunks taken by the writer", func() bool {
		q.mu.Lock()
		defer q.mu.Unlock()
		return q.inFlight > 0
	})
	write(8 * outputChunk >> 10) // into new chunks: none of those taken
	got := make([]byte, want.Len())
	client.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(client, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want.Bytes()) {
		i := 0
		for got[i] == want.Bytes()[i] {
			i++
		}
		t.Fatalf("byte %d of %d read is %d, want %d", i, len(got), got[i], want.Bytes()[i])
	}
}

// A write costs what it writes, however much is queued before it: in one
// growing slice, each growth copied all that was queued, under
// miniredis's lock, so that one PUBLISH to a subscriber 30 MB behind took
// up to 0.7 s (mutant: the queue one []byte again). Counted in bytes
// allocated, not time, which a loaded machine stretches.
func TestOutputQueuedConnWriteCopiesNotWhatIsQueued(t *testing.T) {
	server, client := net.Pipe() // read by no one: all stays queued
	q := newOutputQueuedConn(server, pubsubOutputLimits, nil)
	defer func() {
		client.Close() // fails the writer's write, so that Close need not wait
		q.Close()
	}()
	w := make([]byte, 4<<10) // as miniredis's bufio.Writer writes
	for q.queuedBytes() < 16<<20 {
		if _, err := q.Write(w); err != nil {
			t.Fatal(err)
		}
	}
	var before, after runtime.MemStats
	var worst uint64
	for range 2048 { // 8 MiB more: a slice grows by a quarter
		runtime.ReadMemStats(&before)
		if _, err := q.Write(w); err != nil {
			t.Fatal(err)
		}
		runtime.ReadMemStats(&after)
		worst = max(worst, after.TotalAlloc-before.TotalAlloc)
	}
	if worst > 1<<20 {
		t.Fatalf("a write of %d bytes allocated %d with 16 MiB queued, want less than 1 MiB", len(w), worst)
	}
}

// BenchmarkOutputQueuedConnWrite queues 1 KiB writes behind 16 to 32 MiB a
// client reading nothing left queued; max-ns/op is the slowest write.
func BenchmarkOutputQueuedConnWrite(b *testing.B) {
	w := make([]byte, 1<<10)
	var q *outputQueuedConn
	var client net.Conn
	end := func() {
		if q != nil {
			client.Close()
			q.Close()
		}
	}
	defer end()
	var slowest time.Duration
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if i%(16<<10) == 0 { // a new client, 16 MiB behind
			b.StopTimer()
			end()
			var server net.Conn
			server, client = net.Pipe()
			q = newOutputQueuedConn(server, pubsubOutputLimits, nil)
			for range 1024 {
				q.Write(make([]byte, 16<<10))
			}
			b.StartTimer()
		}
		start := time.Now()
		q.Write(w)
		slowest = max(slowest, time.Since(start))
	}
	b.ReportMetric(float64(slowest.Nanoseconds()), "max-ns/op")
}

// A write queued while a large one is written does not overwrite what is
// being written: a buffer of more than 1 MiB is not kept, and the one kept
// before it was handed to the queue while the writer still held it as its
// spare, so that the next writes went into the buffer then being written
// (the race detector saw it in TestOutputQueuedConnCutsAClientPastTheHardLimit;
// a subscriber or a pooled client was sent bytes of a later reply in place
// of an earlier one's).
func TestOutputQueuedConnWritesWhatWasQueuedAfterALargeWrite(t *testing.T) {
	server, client := stalledPair(t)
	if err := server.(*net.TCPConn).SetWriteBuffer(64 << 10); err != nil {
		t.Fatal(err)
	}
	q := newOutputQueuedConn(server, pubsubOutputLimits, nil)
	defer q.Close()
	fill := func(c byte, n int) []byte { return bytes.Repeat([]byte{c}, n) }
	read := func(want []byte) {
		t.Helper()
		got := make([]byte, len(want))
		client.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.ReadFull(client, got); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			i := 0
			for got[i] == want[i] {
				i++
			}
			t.Fatalf("byte %d of %d read is %q, want %q", i, len(want), got[i], want[i])
		}
	}
	// A write of 1 MiB (its buffer kept), then one of 2 MiB (not kept).
	for _, w := range [][]byte{fill('a', 1<<20), fill('b', 2<<20)} {
		if _, err := q.Write(w); err != nil {
			t.Fatal(err)
		}
		read(w)
	}
	testwait.For(t, "the writes written", func() bool { return q.queuedBytes() == 0 })
	// The client reads nothing while one is written past the sockets'
	// buffers, and another is queued meanwhile.
	first, second := fill('c', 768<<10), fill('d', 768<<10)
	if _, err := q.Write(first); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, "the first taken by the writer", func() bool {
		q.mu.Lock()
		defer q.mu.Unlock()
		return q.inFlight > 0
	})
	if _, err := q.Write(second); err != nil {
		t.Fatal(err)
	}
	read(append(first, second...))
}

// Writes of any size, queued while the writer writes what it took and a
// slow client reads in small pieces, reach the client in order, each byte
// once, and Close writes what is still queued: over TCP (the chunks in one
// writev) and over a pipe (written one by one). Each write's buffer is
// overwritten once taken, as miniredis's bufio.Writer reuses its own
// (mutants: a chunk made spare when taken; the last chunk filled past its
// length while written; a partial writev's rest dropped).
func TestOutputQueuedConnDeliversEveryWriteInOrder(t *testing.T) {
	for _, transport := range []string{"tcp", "pipe"} {
		t.Run(transport, func(t *testing.T) {
			var server, client net.Conn
			if transport == "tcp" {
				server, client = stalledPair(t)
				if err := server.(*net.TCPConn).SetWriteBuffer(16 << 10); err != nil {
					t.Fatal(err)
				}
			} else {
				server, client = net.Pipe()
			}
			q := newOutputQueuedConn(server, pubsubOutputLimits, nil)
			q.subscribed.Store(true) // the limits checked (none reached)
			seed := time.Now().UnixNano()
			t.Logf("seed %d", seed)
			rng := rand.New(rand.NewPCG(uint64(seed), 0))
			var want bytes.Buffer
			var wrote atomic.Bool
			got := make(chan []byte, 1)
			go func() {
				var b bytes.Buffer
				rr := rand.New(rand.NewPCG(uint64(seed), 1))
				p := make([]byte, 64<<10)
				for {
					n := len(p)
					if !wrote.Load() {
						n = 1 + rr.IntN(8<<10) // slow: small reads, now and then a yield
						if rr.IntN(16) == 0 {
							runtime.Gosched()
						}
					}
					k, err := client.Read(p[:n])
					b.Write(p[:k])
					if err != nil {
						got <- b.Bytes()
						return
					}
				}
			}()
			buf := make([]byte, 3*outputChunk)
			for range 300 {
				var n int
				switch rng.IntN(8) {
				case 0:
					n = outputChunk + rng.IntN(2*outputChunk) // a chunk of its own
				case 1:
					n = outputChunk - rng.IntN(16) // about a chunk
				default:
					n = 1 + rng.IntN(512) // a reply or a PUBLISH
				}
				w := buf[:n]
				for i := range w {
					w[i] = byte(want.Len() + i + (want.Len()+i)>>8)
				}
				want.Write(w)
				if _, err := q.Write(w); err != nil {
					t.Fatal(err)
				}
				for i := range w { // as bufio.Writer's next reply
					w[i] = 0xff
				}
				if rng.IntN(4) == 0 {
					runtime.Gosched() // let the writer take what is queued
				}
			}
			wrote.Store(true)
			// Closed with some still queued, which it writes first: less
			// than the client reads in closeFlushTimeout on a busy machine.
			testwait.For(t, "the queue under 1 MiB", func() bool { return q.queuedBytes() < 1<<20 })
			if err := q.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			b := <-got
			if !bytes.Equal(b, want.Bytes()) {
				i := 0
				for i < min(len(b), want.Len()) && b[i] == want.Bytes()[i] {
					i++
				}
				t.Fatalf("the client read %d bytes, want %d; they differ from byte %d", len(b), want.Len(), i)
			}
		})
	}
}
