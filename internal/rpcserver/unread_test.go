package rpcserver

import (
	"context"
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"github.com/cloudwego/kitex/server"
	"github.com/cloudwego/netpoll"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/combo-service/combo-service/kitex_gen/combo"
)

// A peer asks for a large answer, reads none of it, and keeps sending.
// The server cannot write the answer, decodes nothing meanwhile, and
// netpoll reads all the peer sends into the connection's buffer: the
// guard's check on bytes sent ahead, made when the next request is
// decoded, never runs. The connection is closed once it holds more than
// a request and maxAhead unread, long before the write timeout (30 s
// here) would end it; before, it held all the peer sent until then (1.3
// GB in 5 s on loopback with the service's own bounds).
func TestPeerSendingWhileItsAnswerWaitsIsCut(t *testing.T) {
	const maxAhead = 1 << 20
	const limit = MaxRequestBytes + maxAhead
	gone := closed{ch: make(chan struct{}, 1)}
	addr := runServer(t, &bigAnswers{}, append(options(prometheus.NewRegistry(), 100, time.Minute, 30*time.Second, maxAhead, newInFlight(MaxLargeInFlightBytes, ReadWriteTimeout, nil), nil),
		server.WithBoundHandler(gone))...)
	conn := askMergeLatest(t, addr)
	defer conn.Close()
	start := time.Now()
	sent := make(chan int, 1)
	go func() { // bytes, none of them read: the server is stuck writing its answer
		junk := make([]byte, 1<<20)
		n := 0
		_ = conn.SetWriteDeadline(time.Now().Add(20 * time.Second))
		for {
			k, err := conn.Write(junk)
			n += k
			if err != nil {
				sent <- n
				return
			}
		}
	}()
	select {
	case <-gone.ch:
		t.Logf("closed %s after the request", time.Since(start).Round(time.Millisecond))
	case <-time.After(10 * time.Second):
		t.Fatalf("the connection still open 10 s after its peer began sending while its answer waited (limit %d MB)", limit>>20)
	}
	n := <-sent
	t.Logf("the peer sent %d MB before the connection was cut", n>>20)
	// The socket buffers and one look's interval at loopback speed pass
	// the limit by far less than this.
	if n > limit+256<<20 {
		t.Errorf("the peer sent %d MB before the connection was cut, want about %d MB at most", n>>20, limit>>20)
	}
}

// slowMerge answers MergeLatest after it has run for a while.
type slowMerge struct {
	okService
	runs time.Duration
}

func (s *slowMerge) MergeLatest(context.Context, *combo.MergeLatestRequest) (*combo.MergeLatestResponse, error) {
	time.Sleep(s.runs)
	return &combo.MergeLatestResponse{}, nil
}

// A peer that keeps sending while its request's handler runs is cut as
// soon as it passes the bound, not when the handler returns: netpoll
// closes a connection only once its handler is done, and went on reading
// all the peer sent until then (950 MB in a review's 4 s).
func TestPeerSendingWhileItsRequestRunsIsCut(t *testing.T) {
	const maxAhead = 1 << 20
	const runs = 4 * time.Second
	addr := runServer(t, &slowMerge{runs: runs}, options(prometheus.NewRegistry(), 100, time.Minute, ReadWriteTimeout, maxAhead, newInFlight(MaxLargeInFlightBytes, ReadWriteTimeout, nil), nil)...)
	conn := askMergeLatest(t, addr)
	defer conn.Close()
	start := time.Now()
	junk := make([]byte, 1<<20)
	sent := 0
	_ = conn.SetWriteDeadline(start.Add(2 * runs))
	for {
		n, err := conn.Write(junk)
		sent += n
		if err != nil {
			break
		}
	}
	took := time.Since(start)
	t.Logf("the peer's writes failed %v after its request, %d MB sent", took.Round(time.Millisecond), sent>>20)
	if took > runs/2 {
		t.Errorf("the peer could send for %v while a handler of %v ran (%d MB): the connection was not cut at the bound",
			took.Round(time.Millisecond), runs, sent>>20)
	}
}

// bufferedConn is a connection whose unread bytes are buf's.
type bufferedConn struct {
	net.Conn
	buf    *netpoll.LinkBuffer
	closed chan struct{}
}

func (c bufferedConn) Reader() netpoll.Reader { return c.buf }
func (c bufferedConn) Close() error           { close(c.closed); return nil }
func (c bufferedConn) RemoteAddr() net.Addr   { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1} }

// watchedUnreadCloser is an unreadCloser looking every millisecond whose
// rounds must not panic. The watch recovers a panic and goes on (a
// connection closed twice, say, which these tests' connections answer
// with a panic), so the test checks the count once it has ended.
func watchedUnreadCloser(t *testing.T, limit, total int) *unreadCloser {
	t.Helper()
	panics := prometheus.NewCounter(prometheus.CounterOpts{Name: "panics"})
	t.Cleanup(func() {
		if n := testutil.ToFloat64(panics); n != 0 {
			t.Errorf("%v rounds of the watch panicked (a connection closed twice?)", n)
		}
	})
	return newUnreadCloser(limit, total, time.Millisecond, panics)
}

// waitWatchStopped waits up to 5 s until u's watching goroutine says it
// has ended, as it does once no connection is open.
func waitWatchStopped(t *testing.T, u *unreadCloser) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		u.mu.Lock()
		running := u.running
		u.mu.Unlock()
		if !running {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the watching goroutine still runs 5 s after the last connection closed")
		}
	}
}

// activate opens conns on u, and closes them when the test ends.
func activate[C net.Conn](t *testing.T, u *unreadCloser, conns ...C) {
	t.Helper()
	for _, c := range conns {
		if _, err := u.OnActive(context.Background(), c); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, c := range conns {
			u.OnInactive(context.Background(), c)
		}
	})
}

func holding(n int) bufferedConn {
	buf := netpoll.NewLinkBuffer()
	_, _ = buf.WriteBinary(make([]byte, n))
	_ = buf.Flush()
	return bufferedConn{buf: buf, closed: make(chan struct{})}
}

// Only the connection over the limit is closed, once; the watching
// goroutine ends when no connection is open, and starts again with the
// next.
func TestUnreadCloserClosesOnlyWhatIsOverAndStopsWhenIdle(t *testing.T) {
	u := watchedUnreadCloser(t, 100, 1<<30)
	ctx := context.Background()
	under, over := holding(100), holding(101)
	for _, c := range []bufferedConn{under, over} {
		if _, err := u.OnActive(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-over.closed:
	case <-time.After(5 * time.Second):
		t.Fatal("a connection holding 101 unread bytes, limit 100, not closed in 5 s")
	}
	time.Sleep(20 * time.Millisecond) // twenty looks more: the closed one is not closed twice (a panic)
	select {
	case <-under.closed:
		t.Fatal("a connection holding 100 unread bytes, limit 100, was closed")
	default:
	}
	u.OnInactive(ctx, over)
	u.OnInactive(ctx, under)
	waitWatchStopped(t, u)
	again := holding(101)
	if _, err := u.OnActive(ctx, again); err != nil {
		t.Fatal(err)
	}
	select {
	case <-again.closed:
	case <-time.After(5 * time.Second):
		t.Fatal("a connection opened after the watcher stopped was not watched")
	}
	u.OnInactive(ctx, again)
	waitWatchStopped(t, u)
}

// Connections each under their own bound but over the total together:
// those holding the most are closed until the rest fit, and only they.
func TestUnreadCloserBoundsWhatAllConnectionsHold(t *testing.T) {
	u := watchedUnreadCloser(t, 100, 250)
	conns := []bufferedConn{holding(90), holding(80), holding(70), holding(60), holding(0)}
	activate(t, u, conns...)
	select {
	case <-conns[0].closed:
	case <-time.After(5 * time.Second):
		t.Fatal("300 bytes held in all, total bound 250: the connection holding the most not closed in 5 s")
	}
	time.Sleep(20 * time.Millisecond) // twenty looks more: 210 held, under the total
	for i, c := range conns[1:] {
		select {
		case <-c.closed:
			t.Fatalf("connection %d closed though the rest fit the total once the largest was", i+1)
		default:
		}
	}
}

// closePanics is a connection whose Close panics.
type closePanics struct{ bufferedConn }

func (c closePanics) Close() error { panic("a connection in an odd state") }

// A round of the watch that panics is counted, and the watch goes on: it
// still closes a connection over the limit. Before, the panic ended the
// process (the goroutine had no recover).
func TestUnreadCloserSurvivesARoundThatPanics(t *testing.T) {
	panics := prometheus.NewCounter(prometheus.CounterOpts{Name: "panics"})
	u := newUnreadCloser(100, 1<<30, time.Millisecond, panics)
	ctx := context.Background()
	odd := closePanics{holding(101)}
	if _, err := u.OnActive(ctx, odd); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { u.OnInactive(ctx, odd) })
	for deadline := time.Now().Add(5 * time.Second); testutil.ToFloat64(panics) == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no round panicked in 5 s")
		}
	}
	over := holding(101)
	activate(t, u, over)
	select {
	case <-over.closed:
	case <-time.After(5 * time.Second):
		t.Fatal("after a round panicked, a connection holding 101 unread bytes, limit 100, not closed in 5 s")
	}
	if n := testutil.ToFloat64(panics); n != 1 {
		t.Fatalf("%v panics counted, want 1", n)
	}
}

// lenPanics is a connection's reader whose Len always panics.
type lenPanics struct{ *netpoll.LinkBuffer }

func (lenPanics) Len() int { panic("a connection in an odd state") }

type panickyConn struct{ bufferedConn }

func (c panickyConn) Reader() netpoll.Reader { return lenPanics{c.buf} }

// A connection whose reader panics each time it is asked its length is
// closed and forgotten, its panic counted once, and the total bound still
// holds for the others. Before, the panic ended every round before the
// total was summed, for as long as the connection stayed open.
func TestUnreadCloserClosesAConnectionWhoseReaderPanics(t *testing.T) {
	panics := prometheus.NewCounter(prometheus.CounterOpts{Name: "panics"})
	u := newUnreadCloser(100, 150, time.Millisecond, panics)
	odd := panickyConn{holding(10)}
	big, small := holding(90), holding(80)
	activate(t, u, odd)
	activate(t, u, big, small)
	for _, c := range []struct {
		name string
		conn bufferedConn
	}{{"the connection whose reader panics", odd.bufferedConn}, {"the one holding the most of 170 held, total bound 150", big}} {
		select {
		case <-c.conn.closed:
		case <-time.After(5 * time.Second):
			t.Fatalf("%s not closed in 5 s", c.name)
		}
	}
	time.Sleep(20 * time.Millisecond) // twenty looks more: odd is forgotten, small fits
	select {
	case <-small.closed:
		t.Fatal("the connection holding 80 closed though it fits the total once the largest was")
	default:
	}
	if n := testutil.ToFloat64(panics); n != 1 {
		t.Fatalf("%v panics counted, want 1: the connection whose reader panics was looked at again", n)
	}
}

// The total is a bound ("more than" it is over): once closing the
// connections holding the most leaves exactly the total held, the rest
// are kept.
func TestUnreadTotalKeepsWhatHoldsExactlyTheTotal(t *testing.T) {
	u := watchedUnreadCloser(t, 1000, 100)
	conns := []bufferedConn{holding(100), holding(100)} // 200 in all
	activate(t, u, conns...)
	waitClosed(t, conns, 1)
	time.Sleep(20 * time.Millisecond) // twenty looks more: 100 held, the total exactly
	if closed := closedCount(conns); closed != 1 {
		t.Fatalf("2 connections of 100 unread bytes, total bound 100: %d closed, want 1", closed)
	}
}

// The unread bounds are a request and maxAhead per connection, and
// MaxUnreadTotalBytes in all: three peers each holding 30 MB unread while
// their requests run (under a request's bound each, 90 MB together, more
// than a request and maxAhead) are not cut. Bounds of maxAhead alone, or a
// total of one connection's bound, would cut a multiplexing client's
// concurrent large calls, and concurrent callers' large requests.
func TestUnreadWithinBoundsIsKept(t *testing.T) {
	const maxAhead = 1000
	svc := &heldMerge{release: make(chan struct{}), entered: make(chan struct{}, 3)}
	defer close(svc.release)
	addr := runServer(t, svc, options(prometheus.NewRegistry(), 100, time.Minute, ReadWriteTimeout, maxAhead,
		newInFlight(MaxLargeInFlightBytes, ReadWriteTimeout, nil), nil)...)
	junk := make([]byte, 30<<20)
	var conns []net.Conn
	for range 3 {
		conn := askMergeLatest(t, addr)
		defer conn.Close()
		select {
		case <-svc.entered: // decoded: what the peer sends now waits unread
		case <-time.After(5 * time.Second):
			t.Fatal("the request did not reach its handler")
		}
		_ = conn.SetWriteDeadline(time.Now().Add(2 * time.Second))
		if _, err := conn.Write(junk); err != nil {
			t.Fatalf("a peer's 30 MB, sent while its request runs: %v", err)
		}
		conns = append(conns, conn)
	}
	time.Sleep(5 * unreadInterval) // looks at 90 MB held
	for i, conn := range conns {
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
		if _, err := conn.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("connection %d, holding 30 MB unread (90 MB in all): %v, want it open", i, err)
		}
	}
}
