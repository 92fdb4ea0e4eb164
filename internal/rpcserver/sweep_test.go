package rpcserver

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cloudwego/gopkg/protocol/thrift"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/validate"
)

// The largest valid request, a MergeLatest of MaxMergeRecords rows with
// every string at its bound (about 47 MB), is within MaxRequestBytes and
// passes the guard: a smaller bound would refuse a caller the contract
// allows, as a protocol error, its connection closed.
func TestLargestValidRequestIsTaken(t *testing.T) {
	// One string per bound, shared by every row: only the encoded request
	// is ~47 MB, not the rows as well (RSS 335 MB -> 200 MB under -race).
	name, url, itemType := strings.Repeat("a", validate.MaxName), strings.Repeat("a", validate.MaxURL), strings.Repeat("a", validate.MaxItemType)
	req := &combo.MergeLatestRequest{ActivityId: 7, Limit: 0, Records: make([]*combo.ContributionRecord, 0, validate.MaxMergeRecords)}
	for i := range validate.MaxMergeRecords {
		req.Records = append(req.Records, &combo.ContributionRecord{Id: int64(i + 1), UserId: 42, Nickname: name,
			AvatarUrl: url, StarId: 9, ItemId: 3, ItemType: itemType, ItemName: name,
			ItemIcon: url, Quantity: validate.MaxQuantity, ComboCount: 1, CreatedAt: 1732950000000})
	}
	if err := validate.MergeLatest(req); err != nil {
		t.Fatalf("not the largest valid request: %v", err)
	}
	b := request("MergeLatest", &combo.ComboServiceMergeLatestArgs{Req: req})
	if len(b) > MaxRequestBytes {
		t.Fatalf("the largest valid request is %d bytes, past MaxRequestBytes (%d)", len(b), MaxRequestBytes)
	}
	if err := CheckRequest(b); err != nil {
		t.Fatalf("the largest valid request (%d bytes): refused: %v", len(b), err)
	}
}

// nestedLists is a MergeLatest whose arguments hold a field the IDL does
// not have (id 99): k lists nested in one another, each holding the next,
// the innermost empty.
func nestedLists(k int) []byte {
	b := thrift.Binary.AppendMessageBegin(nil, "MergeLatest", thrift.CALL, 1)
	b = append(b, byte(thrift.LIST), 0, 99)
	for i := range k {
		elem, n := thrift.LIST, uint32(1)
		if i == k-1 {
			elem, n = thrift.I32, 0
		}
		b = append(b, byte(elem))
		b = binary.BigEndian.AppendUint32(b, n)
	}
	return append(b, byte(thrift.STOP))
}

// Lists, sets and maps nest within the same 16 levels as structs (the
// arguments struct is the first): a level that did not count would let a
// request of lists nested millions deep, 5 bytes a level, recurse the
// guard past the goroutine's stack bound, a fatal error no recover
// catches.
func TestNestedListsAreBoundedLikeStructs(t *testing.T) {
	if err := CheckRequest(nestedLists(15)); err != nil {
		t.Errorf("16 levels (the arguments and 15 lists): refused: %v", err)
	}
	for _, k := range []int{16, 100} {
		if err := CheckRequest(nestedLists(k)); err == nil || !strings.Contains(err.Error(), "nested too deep") {
			t.Errorf("%d levels (the arguments and %d lists): %v, want nested too deep", k+1, k, err)
		}
	}
}

// The IDL's own levels count too: the arguments, the request, its list
// and the list's Contribution are four of the 16, so a Contribution may
// hold structs the IDL does not have nested 12 deep, not 13.
func TestIDLsLevelsCountInTheNesting(t *testing.T) {
	item := func(k int) []byte {
		b := thrift.Binary.AppendMessageBegin(nil, "ReportContributions", thrift.CALL, 1)
		b = append(b, byte(thrift.STRUCT), 0, 1, byte(thrift.LIST), 0, 1, byte(thrift.STRUCT), 0, 0, 0, 1)
		for range k {
			b = append(b, byte(thrift.STRUCT), 0, 99)
		}
		for range k + 3 { // the nested structs, the Contribution, the request, the arguments
			b = append(b, byte(thrift.STOP))
		}
		return b
	}
	if err := CheckRequest(item(12)); err != nil {
		t.Errorf("a Contribution holding 12 nested structs (16 levels): refused: %v", err)
	}
	if err := CheckRequest(item(13)); err == nil || !strings.Contains(err.Error(), "nested too deep") {
		t.Errorf("a Contribution holding 13 nested structs (17 levels): %v, want nested too deep", err)
	}
}

// The large requests' budget holds two of the largest requests at once,
// not three: each costs about four times its size while in flight, and
// ten at once took a replica to 1.9 GB.
func TestLargeBudgetHoldsTwoOfTheLargest(t *testing.T) {
	if MaxLargeInFlightBytes < 2*MaxRequestBytes || MaxLargeInFlightBytes >= 3*MaxRequestBytes {
		t.Fatalf("MaxLargeInFlightBytes %d holds %d requests of MaxRequestBytes (%d), want 2",
			MaxLargeInFlightBytes, MaxLargeInFlightBytes/MaxRequestBytes, MaxRequestBytes)
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

// A newer client's field that is a list of maps is walked and let
// through, as the generated code skips it: a map is a Thrift type.
func TestNewerClientsListOfMapsIsTaken(t *testing.T) {
	b := thrift.Binary.AppendMessageBegin(nil, "MergeLatest", thrift.CALL, 1)
	b = append(b, byte(thrift.LIST), 0, 99, byte(thrift.MAP), 0, 0, 0, 1, // one map
		byte(thrift.I32), byte(thrift.I32), 0, 0, 0, 1, 0, 0, 0, 7, 0, 0, 0, 8, // {7: 8}
		byte(thrift.STOP))
	if err := CheckRequest(b); err != nil {
		t.Fatalf("a list of maps the IDL does not have: refused: %v", err)
	}
	_, _, _, l, _ := thrift.Binary.ReadMessageBegin(b)
	if _, err := argsOf()["MergeLatest"].FastRead(b[l:]); err != nil {
		t.Fatalf("the generated code does not read it either: %v", err)
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

// README states the RPC server's bounds by their values, which operators
// size replicas and callers by: each is the constant's.
func TestREADMEStatesTheBounds(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := strings.Join(strings.Fields(string(b)), " ")
	for _, want := range []string{
		fmt.Sprintf("within %d MiB at once (`rpcserver.MaxLargeInFlightBytes`", MaxLargeInFlightBytes>>20),
		fmt.Sprintf("at %d GiB, `rpcserver.MaxUnreadTotalBytes`", MaxUnreadTotalBytes>>30),
		fmt.Sprintf("for up to %d s (`rpcserver.ReadWriteTimeout`)", int(ReadWriteTimeout.Seconds())),
		fmt.Sprintf("at most %d MB of further requests sent on its connection", MaxAheadBytes>>20),
		fmt.Sprintf("holding more than %d MB it sent unread (a request and that bound)", (MaxRequestBytes+MaxAheadBytes)>>20),
		fmt.Sprintf("is closed within %d ms and logged", unreadInterval.Milliseconds()),
		fmt.Sprintf("one silent for %d min is closed", int(MaxConnIdle.Minutes())),
	} {
		if !strings.Contains(readme, want) {
			t.Errorf("README does not say %q", want)
		}
	}
}
