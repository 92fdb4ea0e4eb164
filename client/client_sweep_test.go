package client

// Tests pinning what a mutation sweep of NewClient found no test for.

import (
	"net"
	"sync"
	"testing"
	"time"

	kclient "github.com/cloudwego/kitex/client"
	"github.com/cloudwego/netpoll"
)

type timeoutRecorder struct {
	mu       sync.Mutex
	timeouts []time.Duration
}

func (d *timeoutRecorder) DialTimeout(network, address string, timeout time.Duration) (net.Conn, error) {
	d.mu.Lock()
	d.timeouts = append(d.timeouts, timeout)
	d.mu.Unlock()
	return netpoll.DialConnection(network, address, timeout)
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
