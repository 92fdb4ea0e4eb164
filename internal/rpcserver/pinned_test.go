package rpcserver

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloudwego/gopkg/protocol/thrift"
	"github.com/cloudwego/kitex/client/callopt"
	"github.com/cloudwego/kitex/pkg/klog"
	"github.com/cloudwego/kitex/pkg/remote"
	"github.com/cloudwego/kitex/pkg/rpcinfo"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/combo-service/combo-service/client"
	"github.com/combo-service/combo-service/kitex_gen/combo"
)

// nestedStructs is a MergeLatest whose arguments hold k structs nested in
// one another, each a field the IDL does not have (id 99).
func nestedStructs(k int) []byte {
	b := thrift.Binary.AppendMessageBegin(nil, "MergeLatest", thrift.CALL, 1)
	for range k {
		b = append(b, byte(thrift.STRUCT), 0, 99)
	}
	for range k + 1 {
		b = append(b, byte(thrift.STOP))
	}
	return b
}

// The guard's bounds are exact: MaxContainerItems struct fields in all
// (the arguments' req is one), maxDepth levels of nesting (the arguments
// struct is the first), no more.
func TestCheckRequestBoundsAreExact(t *testing.T) {
	// repeatedStruct(n) holds n+1 struct fields: req, and n copies of contribution.
	if err := CheckRequest(repeatedStruct(MaxContainerItems - 1)); err != nil {
		t.Errorf("MaxContainerItems struct fields: refused: %v", err)
	}
	if err := CheckRequest(repeatedStruct(MaxContainerItems)); err == nil {
		t.Error("MaxContainerItems+1 struct fields: passed")
	}
	if err := CheckRequest(nestedStructs(maxDepth - 1)); err != nil {
		t.Errorf("%d levels of structs: refused: %v", maxDepth, err)
	}
	if err := CheckRequest(nestedStructs(maxDepth)); err == nil {
		t.Errorf("%d levels of structs: passed", maxDepth+1)
	}
}

// A list field of the IDL sent as a struct is skipped by the generated
// code, by its wire type, like any field of another type: the guard walks
// it as a struct and lets it through.
func TestKnownListFieldSentAsAStruct(t *testing.T) {
	b := thrift.Binary.AppendMessageBegin(nil, "MergeLatest", thrift.CALL, 1)
	b = append(b, byte(thrift.STRUCT), 0, 1, byte(thrift.STRUCT), 0, 2, byte(thrift.I32), 0, 1, 0, 0, 0, 7,
		byte(thrift.STOP), byte(thrift.STOP), byte(thrift.STOP))
	if err := CheckRequest(b); err != nil {
		t.Fatalf("records as a struct: refused: %v", err)
	}
	_, _, _, l, _ := thrift.Binary.ReadMessageBegin(b)
	if _, err := argsOf()["MergeLatest"].FastRead(b[l:]); err != nil {
		t.Fatalf("records as a struct: the generated code does not read it: %v", err)
	}
}

// A connection may send exactly maxAhead bytes past the request being
// decoded; one byte more and it is refused. The bound counts every byte
// past the request, not past twice its size.
func TestAheadBoundIsExact(t *testing.T) {
	payload := request("ReportContributions", batch(2))
	frame := append(binary.BigEndian.AppendUint32(nil, uint32(len(payload))), payload...)
	three := append(append(append([]byte(nil), frame...), frame...), frame...)
	replies := func(maxAhead int) int {
		return repliesTo(t, serveAhead(t, 100, MaxConnIdle, ReadWriteTimeout, maxAhead), three, 3)
	}
	if n := replies(2 * len(frame)); n != 3 {
		t.Errorf("two frames sent ahead, the bound exactly: %d replies, want 3", n)
	}
	if n := replies(2*len(frame) - 1); n != 0 {
		t.Errorf("two frames sent ahead, one byte past the bound: %d replies, want 0", n)
	}
}

// A request of exactly LargeRequestBytes counts as large ("1 MiB or
// more"): it is admitted into the budget, and counted.
func TestRequestOfExactlyLargeRequestBytesIsLarge(t *testing.T) {
	reg := prometheus.NewRegistry()
	large := newInFlight(2<<20, time.Second, reg)
	addr := runServer(t, &okService{}, options(prometheus.NewRegistry(), 100, time.Minute, 10*time.Second, MaxAheadBytes, large, nil)...)
	for _, n := range []int{LargeRequestBytes - 1, LargeRequestBytes} {
		payload := make([]byte, n) // a Thrift version, then bytes the guard refuses once admitted
		copy(payload, []byte{0x80, 0x01, 0x00, 0x01})
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := conn.Write(append(binary.BigEndian.AppendUint32(nil, uint32(n)), payload...)); err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, conn) // refused: the connection is closed
		conn.Close()
	}
	wantAdmissions(t, reg, map[string]float64{"at_once": 1, "waited": 0, "refused": 0})
	waitWhole(t, large)
}

// pollTimes records when each ReadableLen was asked; nothing ever arrives.
type pollTimes struct {
	remote.ByteBuffer
	mu sync.Mutex
	at []time.Time
}

func (b *pollTimes) ReadableLen() int {
	b.mu.Lock()
	b.at = append(b.at, time.Now())
	b.mu.Unlock()
	return 0
}

// A large request bigger than the whole budget is not refused: it takes
// the whole budget and runs alone.
func TestLargeRequestBiggerThanTheBudgetRunsAlone(t *testing.T) {
	svc := &heldMerge{release: make(chan struct{}), entered: make(chan struct{}, 1)}
	close(svc.release)
	reg := prometheus.NewRegistry()
	large := newInFlight(1<<20, 500*time.Millisecond, reg)
	addr := runServer(t, svc, options(prometheus.NewRegistry(), 100, time.Minute, 10*time.Second, MaxAheadBytes, large, nil)...)
	if _, err := mergeClient(t, addr).MergeLatest(context.Background(), largeMerge(1_200_000),
		callopt.WithRPCTimeout(20*time.Second)); err != nil {
		t.Fatalf("a request of 1.2 MB within a budget of 1 MiB: %v", err)
	}
	wantAdmissions(t, reg, map[string]float64{"at_once": 1, "waited": 0, "refused": 0})
	waitWhole(t, large)
}

// A large request waits for room up to its whole bound: room freed before
// the bound lets it in (counted waited); none by then refuses it, not
// sooner, and not much later either: its caller, told it waits up to
// ReadWriteTimeout, times out rather than hears the refusal.
func TestLargeRequestWaitsItsWholeBound(t *testing.T) {
	const wait = 2 * time.Second
	reg := prometheus.NewRegistry()
	f := newInFlight(1<<20, wait, reg)
	if !f.sem.TryAcquire(f.max) {
		t.Fatal("budget not whole")
	}
	time.AfterFunc(300*time.Millisecond, func() { f.sem.Release(f.max) })
	ri := rpcinfo.NewRPCInfo(nil, nil, nil, nil, nil)
	if err := f.admit(ri, LargeRequestBytes); err != nil {
		t.Fatalf("room freed 300 ms into a %v wait: %v", wait, err)
	}
	f.Finish(rpcinfo.NewCtxWithRPCInfo(context.Background(), ri))

	if !f.sem.TryAcquire(f.max) {
		t.Fatal("budget not whole after Finish")
	}
	start := time.Now()
	if err := f.admit(rpcinfo.NewRPCInfo(nil, nil, nil, nil, nil), LargeRequestBytes); err == nil {
		t.Fatal("admitted with no room")
	}
	if d := time.Since(start); d < wait || d >= 2*wait {
		t.Errorf("refused after %v, want its whole %v wait and no more", d, wait)
	}
	f.sem.Release(f.max)
	wantAdmissions(t, reg, map[string]float64{"at_once": 0, "waited": 1, "refused": 1})
}

// watchers counts the goroutines running an unreadCloser's watch.
func watchers() int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	return strings.Count(string(buf), "(*unreadCloser).watch(")
}

// The watching goroutine itself ends once no connection is open, not only
// its running flag: connections that come and go leave no goroutine
// behind.
func TestUnreadCloserWatcherGoroutineEnds(t *testing.T) {
	u := watchedUnreadCloser(t, 100, 1<<30)
	ctx := context.Background()
	for range 5 {
		c := holding(0)
		if _, err := u.OnActive(ctx, c); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
		u.OnInactive(ctx, c)
		waitWatchStopped(t, u)
	}
	deadline := time.Now().Add(5 * time.Second)
	for watchers() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d watching goroutines 5 s after every connection closed, want 0", watchers())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Every connection holding unread bytes counts towards the total, however
// little each holds: many connections each well under their own bound
// cannot together pass the total.
func TestUnreadTotalCountsSmallHolders(t *testing.T) {
	u := watchedUnreadCloser(t, 100, 250)
	var conns []bufferedConn
	for range 8 {
		conns = append(conns, holding(40)) // 320 in all
	}
	activate(t, u, conns...)
	waitClosed(t, conns, 2)
	time.Sleep(20 * time.Millisecond) // twenty looks more: 240 held, under the total
	if closed := closedCount(conns); closed != 2 {
		t.Fatalf("8 connections of 40 unread bytes, total bound 250: %d closed, want 2", closed)
	}
}

// The total is judged by what connections hold now: one that held the
// most a while ago, and has been read since, is not the one closed.
func TestUnreadTotalClosesByWhatIsHeldNow(t *testing.T) {
	u := watchedUnreadCloser(t, 100, 250)
	ctx := context.Background()
	a := holding(90)
	if _, err := u.OnActive(ctx, a); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond) // many looks at a holding 90
	if err := a.buf.Skip(80); err != nil {
		t.Fatal(err)
	}
	_ = a.buf.Release() // a now holds 10
	time.Sleep(5 * time.Millisecond)
	others := []bufferedConn{holding(85), holding(85), holding(85)} // 265 with a's 10
	for _, c := range others {
		if _, err := u.OnActive(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, c := range append(others, a) {
			u.OnInactive(ctx, c)
		}
	})
	waitClosed(t, others, 1)
	time.Sleep(20 * time.Millisecond) // twenty looks more
	select {
	case <-a.closed:
		t.Fatal("the connection holding 10 bytes now (90 before) was closed")
	default:
	}
	if closed := closedCount(others); closed != 1 {
		t.Fatalf("%d of the connections holding 85 closed, want 1", closed)
	}
}

// The warning for a connection closed over its own bound says so, and one
// closed for the total says that.
func TestUnreadCloserSaysWhichBound(t *testing.T) {
	var out strings.Builder
	var mu sync.Mutex
	klog.SetOutput(writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return out.Write(p) }))
	t.Cleanup(func() { klog.SetOutput(os.Stderr) })
	ctx := context.Background()
	u := watchedUnreadCloser(t, 100, 1<<30)
	over := holding(101)
	if _, err := u.OnActive(ctx, over); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, []bufferedConn{over}, 1)
	u.OnInactive(ctx, over)
	u2 := watchedUnreadCloser(t, 100, 150)
	a, b := holding(90), holding(80)
	for _, c := range []bufferedConn{a, b} {
		if _, err := u2.OnActive(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	waitClosed(t, []bufferedConn{a}, 1)
	u2.OnInactive(ctx, a)
	u2.OnInactive(ctx, b)
	// Each warning is written before its connection is closed; waited for
	// all the same, not slept for, should that order ever change.
	var log string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		mu.Lock()
		log = out.String()
		mu.Unlock()
		if strings.Count(log, "combo-service: closed a connection") >= 2 {
			break
		}
	}
	if !strings.Contains(log, "holding 101 bytes it sent and the server has not read, more than the 100 it may") {
		t.Errorf("no warning naming the per-connection bound: %q", log)
	}
	if !strings.Contains(log, "holding 90 bytes it sent and the server has not read, the most of any while all connections held more than the 150") {
		t.Errorf("no warning naming the total: %q", log)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// A closed connection's idle timer is forgotten with it.
func TestIdleCloserForgetsClosedConnections(t *testing.T) {
	c := newIdleCloser(time.Minute)
	ctx := context.Background()
	for range 3 {
		conn := holding(0)
		if _, err := c.OnActive(ctx, conn); err != nil {
			t.Fatal(err)
		}
		c.OnInactive(ctx, conn)
	}
	n := 0
	c.timers.Range(func(any, any) bool { n++; return true })
	if n != 0 {
		t.Fatalf("%d timers kept for closed connections, want 0", n)
	}
}

// deadlineService records the deadline of each ReportContributions' ctx.
type deadlineService struct {
	okService
	got chan time.Duration // time left at the handler's start; -1: none
}

func (s *deadlineService) ReportContributions(ctx context.Context, req *combo.ReportContributionsRequest) (*combo.ReportContributionsResponse, error) {
	if dl, ok := ctx.Deadline(); ok {
		s.got <- time.Until(dl)
	} else {
		s.got <- -1
	}
	return s.okService.ReportContributions(ctx, req)
}

// The handler's ctx ends with its TTHeader caller's timeout (in ms), not
// later.
func TestHandlerCtxEndsWithCallersTimeout(t *testing.T) {
	svc := &deadlineService{got: make(chan time.Duration, 1)}
	addr := runServer(t, svc, options(prometheus.NewRegistry(), 100, time.Minute, ReadWriteTimeout, MaxAheadBytes, newInFlight(MaxLargeInFlightBytes, ReadWriteTimeout, nil), nil)...)
	cli, err := client.NewClient([]string{addr})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.ReportContributions(context.Background(), batch(1).Req, callopt.WithRPCTimeout(800*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if left := <-svc.got; left <= 0 || left > 800*time.Millisecond {
		t.Fatalf("the handler's ctx had %v left (-1: no deadline), want at most the caller's 800ms", left)
	}
}

// closedCount is how many of conns were closed.
func closedCount(conns []bufferedConn) int {
	closed := 0
	for _, c := range conns {
		select {
		case <-c.closed:
			closed++
		default:
		}
	}
	return closed
}

// waitClosed waits up to 5 s until at least n of conns are closed: a
// loaded machine may hold the watch off for more than a few looks.
func waitClosed(t *testing.T, conns []bufferedConn, n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); closedCount(conns) < n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d connections closed after 5 s, want %d", closedCount(conns), len(conns), n)
		}
	}
}

// One goroutine watches every connection's unread bytes, however many are
// open: a goroutine per connection would walk all of them each interval,
// N times over (10,000 connections: 10^8 looks a second at 50 ms).
func TestOneUnreadWatcherForManyConnections(t *testing.T) {
	before := watcherIDs()
	u := watchedUnreadCloser(t, 100, 1<<30)
	conns := make([]bufferedConn, 8)
	for i := range conns {
		conns[i] = holding(10)
	}
	activate(t, u, conns...)
	var started int
	for id := range watcherIDs() {
		if !before[id] {
			started++
		}
	}
	if started != 1 {
		t.Fatalf("%d goroutines started to watch 8 connections' unread bytes, want 1", started)
	}
}

// watcherIDs is the goroutine ids of the unread watches running now, so a
// test counts those it started and not another test's, still ending. A
// watch is known by what created it: one not yet run shows in the stacks
// as the go statement's wrapper (OnActive.gowrap2), not as watch.
func watcherIDs() map[string]bool {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	ids := map[string]bool{}
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		if strings.Contains(g, "created by github.com/combo-service/combo-service/internal/rpcserver.(*unreadCloser).OnActive") {
			id, _, _ := strings.Cut(strings.TrimPrefix(g, "goroutine "), " ")
			ids[id] = true
		}
	}
	return ids
}

// A newer client's field the IDL does not have, a list of doubles, is
// walked by its wire type and let through, as the generated code skips it.
func TestNewerClientsListOfDoubles(t *testing.T) {
	b := thrift.Binary.AppendMessageBegin(nil, "MergeLatest", thrift.CALL, 1)
	b = append(b, byte(thrift.LIST), 0, 99, byte(thrift.DOUBLE))
	b = binary.BigEndian.AppendUint32(b, 2)
	b = binary.BigEndian.AppendUint64(b, 0x3ff0000000000000) // 1.0
	b = binary.BigEndian.AppendUint64(b, 0x4000000000000000) // 2.0
	b = append(b, byte(thrift.STOP))
	if err := CheckRequest(b); err != nil {
		t.Fatalf("a list<double> field 99: refused: %v", err)
	}
	_, _, _, l, _ := thrift.Binary.ReadMessageBegin(b)
	if _, err := argsOf()["MergeLatest"].FastRead(b[l:]); err != nil {
		t.Fatalf("the generated code does not read it: %v", err)
	}
}

// A closed connection's idle timer is stopped, not only forgotten: left
// running it would hold the connection for MaxConnIdle (two minutes of
// every connection that came and went) and then close it again. (The
// sleep is how long a timer that was not stopped takes to fire, five
// times over: what is checked is that nothing happens.)
func TestIdleCloserStopsTheTimerOfAClosedConnection(t *testing.T) {
	c := newIdleCloser(20 * time.Millisecond)
	ctx := context.Background()
	conn := holding(0)
	if _, err := c.OnActive(ctx, conn); err != nil {
		t.Fatal(err)
	}
	c.OnInactive(ctx, conn)
	time.Sleep(100 * time.Millisecond)
	select {
	case <-conn.closed:
		t.Fatal("the idle timer of a connection already gone fired and closed it")
	default:
	}
}
