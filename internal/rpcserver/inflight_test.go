package rpcserver

import (
	"context"
	"encoding/binary"
	"maps"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	kclient "github.com/cloudwego/kitex/client"
	"github.com/cloudwego/kitex/client/callopt"
	"github.com/cloudwego/kitex/transport"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/combo-service/combo-service/client"
	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/kitex_gen/combo/comboservice"
)

// heldMerge holds each MergeLatest until release is closed, counting how
// many it holds at once.
type heldMerge struct {
	okService
	release chan struct{}
	entered chan struct{}

	mu          sync.Mutex
	now, atOnce int
}

func (s *heldMerge) MergeLatest(context.Context, *combo.MergeLatestRequest) (*combo.MergeLatestResponse, error) {
	s.mu.Lock()
	s.now++
	s.atOnce = max(s.atOnce, s.now)
	s.mu.Unlock()
	s.entered <- struct{}{}
	<-s.release
	s.mu.Lock()
	s.now--
	s.mu.Unlock()
	return &combo.MergeLatestResponse{}, nil
}

// largeMerge is a MergeLatest request of a little over size bytes.
func largeMerge(size int) *combo.MergeLatestRequest {
	name := strings.Repeat("n", 1000)
	req := &combo.MergeLatestRequest{ActivityId: 1}
	for i := 0; i*1000 < size; i++ {
		req.Records = append(req.Records, &combo.ContributionRecord{Id: int64(i + 1), UserId: 2, ItemId: 3,
			ItemType: "x", ItemName: name, Quantity: 1, CreatedAt: 1732950000000})
	}
	return req
}

func mergeClient(t *testing.T, addr string) comboservice.Client {
	t.Helper()
	cli, err := comboservice.NewClient(client.ServiceName, kclient.WithHostPorts(addr),
		kclient.WithTransportProtocol(transport.TTHeaderFramed))
	if err != nil {
		t.Fatal(err)
	}
	return cli
}

// Large requests run within the budget of bytes in flight: past it, one
// waits for room (it does not fail), and once every call has ended the
// whole budget is free again. Small requests never wait.
func TestLargeRequestsWaitForRoomInTheBudget(t *testing.T) {
	const budget = 3 << 20 // two requests of 1.2 MB, not three
	svc := &heldMerge{release: make(chan struct{}), entered: make(chan struct{}, 3)}
	reg := prometheus.NewRegistry()
	large := newInFlight(budget, 10*time.Second, reg)
	addr := runServer(t, svc, options(prometheus.NewRegistry(), 100, time.Minute, 10*time.Second, MaxAheadBytes, large, nil)...)
	cli := mergeClient(t, addr)

	errs := make(chan error, 3)
	for range 3 {
		go func() {
			_, err := cli.MergeLatest(context.Background(), largeMerge(1_200_000), callopt.WithRPCTimeout(20*time.Second))
			errs <- err
		}()
	}
	for range 2 {
		select {
		case <-svc.entered:
		case <-time.After(10 * time.Second):
			t.Fatal("two large requests did not both reach the handler")
		}
	}
	// The third waits for room; a report goes through meanwhile.
	if err := report(addr); err != nil {
		t.Fatalf("a small request while the budget is full: %v", err)
	}
	select {
	case <-svc.entered:
		t.Fatal("a third large request reached the handler with the budget full")
	case <-time.After(300 * time.Millisecond):
	}
	close(svc.release)
	for range 3 {
		if err := <-errs; err != nil {
			t.Fatalf("a large request failed: %v", err)
		}
	}
	svc.mu.Lock()
	atOnce := svc.atOnce
	svc.mu.Unlock()
	if atOnce != 2 {
		t.Fatalf("%d large requests were handled at once, want 2 within %d bytes", atOnce, budget)
	}
	wantAdmissions(t, reg, map[string]float64{"at_once": 2, "waited": 1, "refused": 0})
	waitWhole(t, large)
}

// One that waits past its bound is refused, and takes nothing with it.
func TestLargeRequestRefusedAfterWaitingItsBound(t *testing.T) {
	const budget = 2 << 20
	svc := &heldMerge{release: make(chan struct{}), entered: make(chan struct{}, 2)}
	reg := prometheus.NewRegistry()
	large := newInFlight(budget, 500*time.Millisecond, reg)
	addr := runServer(t, svc, options(prometheus.NewRegistry(), 100, time.Minute, 10*time.Second, MaxAheadBytes, large, nil)...)
	cli := mergeClient(t, addr)

	first := make(chan error, 1)
	go func() {
		_, err := cli.MergeLatest(context.Background(), largeMerge(1_200_000), callopt.WithRPCTimeout(20*time.Second))
		first <- err
	}()
	select {
	case <-svc.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the first large request did not reach the handler")
	}
	_, err := cli.MergeLatest(context.Background(), largeMerge(1_200_000), callopt.WithRPCTimeout(20*time.Second))
	if err == nil {
		t.Fatal("a large request past the budget was served")
	}
	close(svc.release)
	if err := <-first; err != nil {
		t.Fatalf("the first large request: %v", err)
	}
	wantAdmissions(t, reg, map[string]float64{"at_once": 1, "waited": 0, "refused": 1})
	waitWhole(t, large)
}

// A large request whose caller leaves while it runs gives its room back
// all the same: Kitex finishes the RPC when its answer cannot be written.
func TestLargeRequestWhoseCallerLeftGivesItsRoomBack(t *testing.T) {
	svc := &heldMerge{release: make(chan struct{}), entered: make(chan struct{}, 1)}
	large := newInFlight(2<<20, 10*time.Second, nil)
	addr := runServer(t, svc, options(prometheus.NewRegistry(), 100, time.Minute, 10*time.Second, MaxAheadBytes, large, nil)...)
	cli := mergeClient(t, addr)
	done := make(chan error, 1)
	go func() {
		_, err := cli.MergeLatest(context.Background(), largeMerge(1_200_000), callopt.WithRPCTimeout(200*time.Millisecond))
		done <- err
	}()
	select {
	case <-svc.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the large request did not reach the handler")
	}
	if err := <-done; err == nil {
		t.Fatal("the caller's call did not time out")
	}
	close(svc.release)
	waitWhole(t, large)
}

// waitWhole waits for large's whole budget to be free: an RPC gives its
// room back as it finishes, just after its answer is written.
func waitWhole(t *testing.T, large *inFlight) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !large.sem.TryAcquire(large.max) {
		if time.Now().After(deadline) {
			t.Fatal("the budget of large requests is not whole again after every call ended")
		}
		time.Sleep(10 * time.Millisecond)
	}
	large.sem.Release(large.max)
}

// A large request takes its room once its bytes are here, not on its
// header's word: 8 bytes claiming 64 MiB, never followed by more, held
// that much room (the whole budget, two such connections in production)
// until the read timeout cut them, and every large call meanwhile waited
// or was refused.
func TestAHeaderAloneTakesNoRoom(t *testing.T) {
	svc := &heldMerge{release: make(chan struct{}), entered: make(chan struct{}, 1)}
	close(svc.release)
	large := newInFlight(2<<20, 500*time.Millisecond, nil)
	addr := runServer(t, svc, options(prometheus.NewRegistry(), 100, time.Minute, 10*time.Second, MaxAheadBytes, large, nil)...)
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// A Framed length of 64 MiB and a Thrift binary version: then nothing.
	if _, err := conn.Write(append(binary.BigEndian.AppendUint32(nil, MaxRequestBytes), 0x80, 0x01, 0x00, 0x01)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // no event tells the header was read: give it time
	start := time.Now()
	if _, err := mergeClient(t, addr).MergeLatest(context.Background(), largeMerge(1_200_000),
		callopt.WithRPCTimeout(20*time.Second)); err != nil {
		t.Fatalf("a large request while a header alone waits for its bytes: %v after %v", err, time.Since(start))
	}
}

// Room is given back once per large request: the next requests on its
// connection, whose RPCInfo Kitex reuses, give back nothing more (a
// semaphore given back more than it lent lets more than the budget in).
func TestRoomIsGivenBackOncePerRequest(t *testing.T) {
	svc := &heldMerge{release: make(chan struct{}), entered: make(chan struct{}, 4)}
	close(svc.release)
	large := newInFlight(2<<20, 10*time.Second, nil)
	addr := runServer(t, svc, options(prometheus.NewRegistry(), 100, time.Minute, 10*time.Second, MaxAheadBytes, large, nil)...)
	cli := mergeClient(t, addr)
	for _, size := range []int{1_200_000, 10, 10, 10} { // one after another: one pooled connection
		if _, err := cli.MergeLatest(context.Background(), largeMerge(size), callopt.WithRPCTimeout(20*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	waitWhole(t, large)
	if !large.sem.TryAcquire(large.max) {
		t.Fatal("the budget is not whole")
	}
	defer large.sem.Release(large.max)
	if large.sem.TryAcquire(1) {
		t.Fatal("more room than the budget: a request's room was given back twice")
	}
}

// wantAdmissions fails unless combo_large_requests_total reads want, by
// admission.
func wantAdmissions(t *testing.T, reg *prometheus.Registry, want map[string]float64) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "combo_large_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			got[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
		}
	}
	if !maps.Equal(got, want) {
		t.Errorf("combo_large_requests_total by admission: %v, want %v", got, want)
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
