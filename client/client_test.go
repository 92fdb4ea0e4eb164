package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	kclient "github.com/cloudwego/kitex/client"
	"github.com/cloudwego/kitex/pkg/remote"

	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/kitex_gen/combo/comboservice"
)

func TestIsComboError(t *testing.T) {
	ce := &combo.ComboError{Code: CodeUnavailable, Message: "redis down"}
	for _, err := range []error{ce, fmt.Errorf("call: %w", ce)} {
		got, ok := IsComboError(err)
		if !ok || got != ce {
			t.Fatalf("IsComboError(%v) = %v, %v", err, got, ok)
		}
	}
	for _, err := range []error{nil, errors.New("timeout"), (*combo.ComboError)(nil)} {
		if got, ok := IsComboError(err); ok {
			t.Fatalf("IsComboError(%v) = %v, true", err, got)
		}
	}
}

func TestNewClient(t *testing.T) {
	if _, err := NewClient(nil); err == nil {
		t.Fatal("NewClient(nil): want an error")
	}
	// Building dials nothing (a caller's dialer, which replaces
	// NewClient's, is not called); the client satisfies BatchSender.
	d := &dialCounter{}
	cli, err := NewClient([]string{"127.0.0.1:8888"}, kclient.WithDialer(d))
	if err != nil {
		t.Fatal(err)
	}
	if n := d.n.Load(); n != 0 {
		t.Fatalf("NewClient dialed %d times while building the client", n)
	}
	var _ BatchSender = cli
}

// An address that is no host:port is refused when the client is built,
// naming it: Kitex took it for a Unix socket path and the client could
// never reach the service, with no error anywhere but each call's.
func TestNewClientRefusesBadAddresses(t *testing.T) {
	for _, hp := range []string{"127.0.0.1", "combo-service", "", "combo-service:", "combo-service:0", "combo-service:65536", "combo-service:http"} {
		_, err := NewClient([]string{"127.0.0.1:8888", hp})
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("hostPorts[1] must be host:port, got %q", hp)) {
			t.Errorf("NewClient(%q) = %v, want an error naming hostPorts[1]", hp, err)
		}
	}
	for _, hp := range []string{"localhost:8888", "[::1]:8888", ":8888", "combo-service.example:65535"} {
		if _, err := NewClient([]string{hp}); err != nil {
			t.Errorf("NewClient(%q) = %v, want a client", hp, err)
		}
	}
}

// A host name that does not resolve when the client is built (a service
// not in DNS yet: its pods not ready, a DNS hiccup at start-up) is still
// dialed over TCP, looked up at each dial, so the client works once the
// name resolves. Kitex's WithHostPorts took it for a Unix socket path for
// good.
func TestNewClientDoesNotResolveAtBuild(t *testing.T) {
	const unresolved = "combo-service.invalid:8888"
	cli, err := NewClient([]string{unresolved}, kclient.WithRPCTimeout(waitFor))
	if err != nil {
		t.Fatal(err)
	}
	_, err = cli.ReportContributions(context.Background(), &combo.ReportContributionsRequest{
		Contributions: []*combo.Contribution{contribution(1)},
	})
	if err == nil {
		t.Fatal("a call to an unresolvable host succeeded")
	}
	// The dial looks the name up (and would connect once it resolves); a
	// Unix socket dial never would.
	if msg := err.Error(); strings.Contains(msg, "unix") || !strings.Contains(msg, "lookup combo-service.invalid") {
		t.Fatalf("call error %q, want the TCP dial's lookup of %s", msg, unresolved)
	}
}

// A host with spaces can never be looked up, so NewClient refuses it
// rather than build a client that never reaches that replica. An address
// list "a:8888, b:8888" split on "," gives " b:8888".
func TestNewClientRefusesHostsWithSpaces(t *testing.T) {
	for _, hp := range []string{" combo-b:8888", "combo-b :8888", "\tcombo-b:8888", "[ ::1]:8888"} {
		_, err := NewClient([]string{"combo-a:8888", hp})
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("hostPorts[1] must be host:port, got %q", hp)) {
			t.Errorf("NewClient(%q) = %v, want an error naming hostPorts[1]", hp, err)
		}
	}
}

// dialCounter is a caller's own dialer: dialOne's (netpoll's; Go's on
// Windows), counting its dials.
type dialCounter struct{ n atomic.Int64 }

func (d *dialCounter) DialTimeout(network, address string, timeout time.Duration) (net.Conn, error) {
	d.n.Add(1)
	return dialOne(network, address, timeout)
}

// A caller's kclient.WithDialer replaces NewClient's dialer, in a build
// without inlining too (go test -gcflags=all=-l), where Kitex panicked on
// a second WithDialer.
func TestNewClientTakesTheCallersDialer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	conns := accepted(t, ln)
	d := &dialCounter{}
	cli, err := NewClient([]string{ln.Addr().String()}, kclient.WithDialer(d), kclient.WithRPCTimeout(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	_ = report(cli) // the listener answers nothing: the call fails, after the dial
	select {
	case <-conns:
	case <-time.After(waitFor):
		t.Fatalf("no TCP connection to %s within %s", ln.Addr(), waitFor)
	}
	if d.n.Load() == 0 {
		t.Fatal("the caller's dialer was not used")
	}
}

// dialerOption builds every option it returns at one place, so they share
// one function name, as all WithDialer options do in a build without
// inlining.
//
//go:noinline
func dialerOption(d remote.Dialer) kclient.Option { return kclient.WithDialer(d) }

// setsOnceOption finds a second option exactly when Kitex would panic on
// it: two built at one place (one name) always; two built at two places
// when the build inlines kclient.WithDialer into each (two names) or not.
func TestSetsOnceOptionMatchesKitex(t *testing.T) {
	build := func(opts ...kclient.Option) (panicked bool) {
		defer func() { panicked = recover() != nil }()
		_, _ = comboservice.NewClient(ServiceName, append(opts, kclient.WithHostPorts("127.0.0.1:8888"))...)
		return false
	}
	ours := dialerOption(&dialCounter{})
	if !build(ours, dialerOption(&dialCounter{})) {
		t.Fatal("Kitex took two WithDialer options built at one place")
	}
	for name, o := range map[string]kclient.Option{
		"built at one place":  dialerOption(&dialCounter{}),
		"built at two places": kclient.WithDialer(&dialCounter{}),
	} {
		if found, panics := setsOnceOption([]kclient.Option{o}, ours), build(ours, o); found != panics {
			t.Errorf("WithDialer %s: setsOnceOption %v, Kitex panics %v", name, found, panics)
		}
	}
	if setsOnceOption([]kclient.Option{kclient.WithRPCTimeout(time.Second)}, ours) {
		t.Error("setsOnceOption found a WithDialer among other options")
	}
}
