package client_test

import (
	"context"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	kclient "github.com/cloudwego/kitex/client"
	"github.com/cloudwego/kitex/server"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/combo-service/combo-service/client"
	"github.com/combo-service/combo-service/internal/rpcserver"
	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/kitex_gen/combo/comboservice"
)

// These tests give a host name several A records, as a headless Kubernetes
// service or docker compose replicas do, each record a replica on its own
// loopback address (all of 127/8 is loopback on Linux). They swap the
// process's resolver, as the name tests of package client do: none of
// them runs in parallel.

// fakeARecords makes the process's resolver answer every A query with
// ips, in that order (and AAAA queries with no record), for this test;
// SetA on the result changes them.
func fakeARecords(t *testing.T, ips ...string) *client.FakeDNS {
	t.Helper()
	dns := client.StartFakeDNS(t)
	dns.SetA(ips...)
	dns.UseResolver(t)
	return dns
}

// counting answers ReportContribution after a millisecond, so that
// concurrent callers each hold a connection, and counts the calls.
type counting struct{ n atomic.Int64 }

func (c *counting) ReportContribution(_ context.Context, r *combo.ReportContributionRequest) (*combo.ReportContributionResponse, error) {
	c.n.Add(1)
	time.Sleep(time.Millisecond)
	return &combo.ReportContributionResponse{WindowId: r.Contribution.Id, WindowQuantity: 1}, nil
}

func (c *counting) ReportContributions(context.Context, *combo.ReportContributionsRequest) (*combo.ReportContributionsResponse, error) {
	return &combo.ReportContributionsResponse{}, nil
}

func (c *counting) MergeLatest(context.Context, *combo.MergeLatestRequest) (*combo.MergeLatestResponse, error) {
	return &combo.MergeLatestResponse{}, nil
}

// replica serves the service's Kitex set-up (rpcserver.Options) on
// ip:port until the test ends.
func replica(t *testing.T, ip string, port int) *counting {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
	if err != nil {
		t.Fatal(err)
	}
	h := &counting{}
	ctx, stop := context.WithCancel(context.Background())
	svr := comboservice.NewServer(h, append(rpcserver.Options(prometheus.NewRegistry(), 100, nil), server.WithListener(ln), rpcserver.StopOn(ctx))...)
	done := make(chan error, 1)
	go func() { done <- svr.Run() }()
	t.Cleanup(func() {
		stop()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("the replica's server Run did not return within 10 s of its StopOn context ending")
		}
	})
	return h
}

// freePort is a TCP port that each of ips can bind now. A port free on
// 127.0.0.1 need not be on 127.0.0.2: the kernel hands out a port bound
// on another address only, a replica of an earlier test there, say, or of
// another test binary running the same tests.
func freePort(t *testing.T, ips ...string) int {
	t.Helper()
	for range 100 {
		first, err := net.Listen("tcp", net.JoinHostPort(ips[0], "0"))
		if err != nil {
			t.Fatal(err)
		}
		port := first.Addr().(*net.TCPAddr).Port
		lns := []net.Listener{first}
		for _, ip := range ips[1:] {
			ln, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
			if err != nil {
				break
			}
			lns = append(lns, ln)
		}
		for _, ln := range lns {
			ln.Close()
		}
		if len(lns) == len(ips) {
			return port
		}
	}
	t.Fatalf("no port free on all of %v", ips)
	return 0
}

// newReplicasClient is NewClient for combo-replicas.test:port.
func newReplicasClient(t *testing.T, port int, opts ...kclient.Option) comboservice.Client {
	t.Helper()
	cli, err := client.NewClient([]string{"combo-replicas.test:" + strconv.Itoa(port)}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return cli
}

// load makes calls from callers goroutines at once for d.
func load(cli comboservice.Client, callers int, d time.Duration) {
	var wg sync.WaitGroup
	end := time.Now().Add(d)
	for g := range callers {
		wg.Go(func() {
			for i := int64(1); time.Now().Before(end); i++ {
				_, _ = cli.ReportContribution(context.Background(), &combo.ReportContributionRequest{
					Contribution: &combo.Contribution{Id: int64(g)<<32 | i, Quantity: 1}})
			}
		})
	}
	wg.Wait()
}

// A name with several A records: each connection the client dials goes
// to one of them at random, so every replica takes calls. netpoll alone
// dialed the first record every time.
func TestDNSNameWithSeveralARecordsSpreadsCalls(t *testing.T) {
	ips := []string{"127.0.0.2", "127.0.0.3", "127.0.0.4"}
	port := freePort(t, ips...)
	var reps []*counting
	for _, ip := range ips {
		reps = append(reps, replica(t, ip, port))
	}
	fakeARecords(t, ips...)
	cli := newReplicasClient(t, port)

	// 32 callers hold about 32 connections: a replica is dialed by none
	// of them with a chance of 3 × (2/3)^32, under 10^-5.
	load(cli, 32, 300*time.Millisecond)
	for i, r := range reps {
		t.Logf("%s: %d calls", ips[i], r.n.Load())
		if r.n.Load() == 0 {
			t.Errorf("replica %s took no call", ips[i])
		}
	}
}

// A replica added to the name later takes calls on the connections dialed
// after it was added (here, as the load grows); netpoll alone dialed the
// first record, the old replica. Connections already open stay where they
// are: see the package comment.
func TestDNSNameGainingAReplicaTakesNewConnections(t *testing.T) {
	port := freePort(t, "127.0.0.2", "127.0.0.3")
	old, added := replica(t, "127.0.0.2", port), replica(t, "127.0.0.3", port)
	dns := fakeARecords(t, "127.0.0.2")
	cli := newReplicasClient(t, port)

	load(cli, 8, 200*time.Millisecond)
	dns.SetA("127.0.0.2", "127.0.0.3")
	before := old.n.Load()
	// About 32 more connections, each to 127.0.0.3 with a chance of 1/2.
	load(cli, 40, 300*time.Millisecond)
	t.Logf("after the new replica joined: old %d calls, new %d", old.n.Load()-before, added.n.Load())
	if added.n.Load() == 0 {
		t.Error("the replica added to the name took no call on the connections dialed since")
	}
}

// A name whose first A record drops packets: the connect timeout is shared
// among the records, so the live one is reached in time, at each dial.
// netpoll alone gave the first record the whole connect timeout, and every
// call failed (Kitex retried the dial until the RPC timeout, each time on
// the dead record).
func TestDNSNameFirstRecordDeadFallsBack(t *testing.T) {
	port := freePort(t, "127.0.0.2", "127.0.0.3")
	client.Blackhole(t, "127.0.0.2", port)
	up := replica(t, "127.0.0.3", port)
	fakeARecords(t, "127.0.0.2", "127.0.0.3")
	// A short-connection client dials at each call. The dead record gets
	// half the connect timeout when it is tried first, 1 s: a call that
	// took the whole 2 s would have waited for it alone. The other half is
	// the margin for the live record's dial and the call itself, which
	// took up to 290 ms on a loaded 2-core machine under -race.
	const connect = 2 * time.Second
	cli := newReplicasClient(t, port, kclient.WithShortConnection(),
		kclient.WithConnectTimeout(connect), kclient.WithRPCTimeout(10*time.Second))

	// The records are tried in random order: 127.0.0.2 first in about
	// half of the dials. Calls go on until it was first twice (a call
	// that took half the connect timeout or more), at most 32: none of 32
	// has a chance of 1 in 2^32.
	calls, fellBack := 0, 0
	for ; calls < 32 && fellBack < 2; calls++ {
		start := time.Now()
		_, err := cli.ReportContribution(context.Background(), &combo.ReportContributionRequest{
			Contribution: &combo.Contribution{Id: int64(calls + 1), Quantity: 1}})
		took := time.Since(start)
		if err != nil || took >= connect {
			t.Fatalf("call %d: %v after %s, want an answer within the connect timeout (%s)", calls, err, took, connect)
		}
		if took >= connect/2 {
			fellBack++
		}
	}
	if fellBack < 2 {
		t.Fatalf("the dead record was tried first in %d of %d calls, want 2: the test did not test", fellBack, calls)
	}
	if got := up.n.Load(); got != int64(calls) {
		t.Errorf("the live replica 127.0.0.3 took %d of %d calls", got, calls)
	}
}
