package client

// Tests pinning what a mutation sweep of NewClient found no test for.

import (
	"context"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	kclient "github.com/cloudwego/kitex/client"
	"github.com/cloudwego/kitex/pkg/kerrors"

	"github.com/combo-service/combo-service/internal/testkitex"
	"github.com/combo-service/combo-service/kitex_gen/combo"
)

type timeoutRecorder struct {
	mu       sync.Mutex
	timeouts []time.Duration
}

func (d *timeoutRecorder) DialTimeout(network, address string, timeout time.Duration) (net.Conn, error) {
	d.mu.Lock()
	d.timeouts = append(d.timeouts, timeout)
	d.mu.Unlock()
	return dialOne(network, address, timeout)
}

// NewClient dials with DefaultClientConnectTimeout (200 ms), as its doc
// says, not Kitex's own 50 ms. (Mutant: drop
// kclient.WithConnectTimeout(DefaultClientConnectTimeout).)
func TestNewClientConnectTimeoutIsTheDefault(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	conns := accepted(t, ln)
	d := &timeoutRecorder{}
	cli, err := NewClient([]string{ln.Addr().String()}, kclient.WithDialer(d), kclient.WithRPCTimeout(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	_ = report(cli)
	select {
	case <-conns:
	case <-time.After(waitFor):
		t.Fatal("no connection")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.timeouts) == 0 || d.timeouts[0] != DefaultClientConnectTimeout {
		t.Fatalf("dial timeouts %v, want %v", d.timeouts, DefaultClientConnectTimeout)
	}
}

// Every hostPorts entry takes calls: Kitex balances among all of them.
// (Mutant: staticResolver answers Instances: ins[:1].)
func TestNewClientSpreadsCallsOverEveryHostPort(t *testing.T) {
	var addrs []string
	var chans []<-chan struct{}
	for range 2 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addrs = append(addrs, ln.Addr().String())
		chans = append(chans, accepted(t, ln))
	}
	cli, err := NewClient(addrs, kclient.WithRPCTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	seen := make([]bool, len(chans))
	deadline := time.Now().Add(waitFor)
	for !(seen[0] && seen[1]) {
		if time.Now().After(deadline) {
			t.Fatalf("connections per address %v, want every address dialed", seen)
		}
		_ = report(cli)
		for i, ch := range chans {
			select {
			case <-ch:
				seen[i] = true
			default:
			}
		}
	}
}

// The defaults the package doc, README and CONTRACT.md state in words:
// a test comparing a default with its own constant does not notice the
// constant change. (Mutants: each constant's value.)
func TestDefaultsAreTheDocumentedOnes(t *testing.T) {
	for _, c := range []struct {
		name      string
		got, want any
	}{
		{"DefaultClientRPCTimeout", DefaultClientRPCTimeout, time.Second},
		{"DefaultClientConnectTimeout", DefaultClientConnectTimeout, 200 * time.Millisecond},
		{"DefaultQueueSize", DefaultQueueSize, 10000},
		{"DefaultBatchSize", DefaultBatchSize, 50},
		{"MaxBatchSize", MaxBatchSize, 1000},
		{"DefaultLinger", DefaultLinger, 20 * time.Millisecond},
		{"DefaultConcurrency", DefaultConcurrency, 4},
		{"DefaultMaxRetries", DefaultMaxRetries, 10},
		{"DefaultInitialBackoff", DefaultInitialBackoff, 50 * time.Millisecond},
		{"DefaultMaxBackoff", DefaultMaxBackoff, 5 * time.Second},
		{"DefaultRPCTimeout", DefaultRPCTimeout, time.Second},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, documented as %v", c.name, c.got, c.want)
		}
	}
}

// A call given no timeout of its own ends at DefaultClientRPCTimeout, not
// never: Kitex's own default is no RPC timeout, and a replica that took a
// call and never answered held its caller for good. (Mutant: drop
// kclient.WithRPCTimeout(DefaultClientRPCTimeout).)
func TestNewClientTimesOutACallAtTheDefault(t *testing.T) {
	svc := &slowService{delay: time.Hour, stop: make(chan struct{})}
	addr := testkitex.Serve(t, svc)
	t.Cleanup(func() { close(svc.stop) }) // runs before the server stops
	cli, err := NewClient([]string{addr})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- report(cli) }()
	select {
	case err := <-done:
		if took := time.Since(start); !kerrors.IsTimeoutError(err) || took < DefaultClientRPCTimeout {
			t.Fatalf("call to a replica that never answers: %v after %s, want an RPC timeout at %s", err, took, DefaultClientRPCTimeout)
		}
	case <-time.After(waitFor):
		t.Fatalf("call to a replica that never answers still waiting after %s, want an RPC timeout at %s", waitFor, DefaultClientRPCTimeout)
	}
}

// gatherService answers the ReportContributions of a round once all of
// them are in, so that they are in flight together, each on a connection
// of its own.
type gatherService struct {
	slowService
	mu   sync.Mutex
	want int
	in   int
	all  chan struct{}
}

func (s *gatherService) round(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.want, s.in, s.all = n, 0, make(chan struct{})
}

func (s *gatherService) ReportContributions(ctx context.Context, req *combo.ReportContributionsRequest) (*combo.ReportContributionsResponse, error) {
	s.mu.Lock()
	all := s.all
	if s.in++; s.in == s.want {
		close(all)
	}
	s.mu.Unlock()
	select {
	case <-all:
	case <-s.stop:
	}
	return s.slowService.ReportContributions(ctx, req)
}

// NewClient keeps up to 64 idle connections per address, not Kitex's 10:
// a caller with 32 calls in flight reuses its connections rather than
// redial 22 of them for every such burst. (Mutants: MaxIdlePerAddress
// 64 -> 10; WithLongConnection dropped or made WithShortConnection.)
func TestNewClientKeepsAConnectionPerConcurrentCall(t *testing.T) {
	const calls = 32
	svc := &gatherService{slowService: slowService{stop: make(chan struct{})}}
	addr := testkitex.Serve(t, svc)
	t.Cleanup(func() { close(svc.stop) }) // runs before the server stops
	d := &dialCounter{}
	cli, err := NewClient([]string{addr}, kclient.WithDialer(d), kclient.WithRPCTimeout(waitFor))
	if err != nil {
		t.Fatal(err)
	}
	for round := range 2 {
		svc.round(calls)
		errs := make(chan error, calls)
		for range calls {
			go func() { errs <- report(cli) }()
		}
		for range calls {
			if err := <-errs; err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
		if n := d.n.Load(); n != calls {
			t.Fatalf("after round %d of %d concurrent calls: %d dials, want %d (the first round's connections kept)", round, calls, n, calls)
		}
	}
}

// spreadDialer bounds every dial by the connect timeout: an IP literal's,
// which it hands to netpoll as it is, and a name's lookup. netpoll takes a
// zero timeout as none, so a replica dropping packets would hold the dial
// for the kernel's SYN retries (about 2 min), and a DNS server that does
// not answer would hold it for the resolver's own timeouts (5 s a try).
// (Mutants: an IP literal dialed with timeout 0; the lookup given
// context.Background().)
func TestSpreadDialerBoundsEveryDialByItsTimeout(t *testing.T) {
	const timeout = 200 * time.Millisecond
	const bound = 2 * time.Second // the timeout, and a loaded machine's margin

	silent, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { silent.Close() })
	(&FakeDNS{conn: silent}).UseResolver(t) // takes queries, answers none

	port := blackholedPort(t, "127.0.0.2")

	for _, addr := range []string{
		net.JoinHostPort("127.0.0.2", strconv.Itoa(port)),         // drops SYNs
		net.JoinHostPort("combo-silent.test", strconv.Itoa(port)), // its lookup unanswered
	} {
		start := time.Now()
		done := make(chan error, 1)
		go func() {
			c, err := spreadDialer{}.DialTimeout("tcp", addr, timeout)
			if c != nil {
				c.Close()
			}
			done <- err
		}()
		select {
		case err := <-done:
			if took := time.Since(start); err == nil || took > bound {
				t.Errorf("dial %s with timeout %s: %v after %s, want an error within %s", addr, timeout, err, took, bound)
			}
		case <-time.After(waitFor):
			t.Errorf("dial %s with timeout %s still under way after %s", addr, timeout, waitFor)
		}
	}
}

// ":port", which NewClient takes, is dialed on the local host, as Go and
// netpoll dial it, not looked up as a name "". (Mutant: drop host == "".)
func TestSpreadDialerDialsAnEmptyHostLocally(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	c, err := spreadDialer{}.DialTimeout("tcp", ":"+port, time.Second)
	if err != nil {
		t.Fatalf("dial :%s: %v, want the local listener", port, err)
	}
	c.Close()
}
