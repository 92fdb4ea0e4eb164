package client

import (
	"context"
	"encoding/binary"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	kclient "github.com/cloudwego/kitex/client"
	"github.com/cloudwego/kitex/client/callopt"

	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/kitex_gen/combo/comboservice"
)

// FakeDNS is a DNS server for this package's tests, exported for those
// of client_test too: it answers A queries with the addresses SetA last
// gave, in that order, NXDOMAIN before the first SetA (a name not in DNS
// yet, then in it), and AAAA queries with no record.
type FakeDNS struct {
	conn net.PacketConn
	a    atomic.Pointer[[]string]
}

// StartFakeDNS serves a FakeDNS on a local UDP port until the test ends.
func StartFakeDNS(t *testing.T) *FakeDNS {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := &FakeDNS{conn: pc}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if resp := d.answer(buf[:n]); resp != nil {
				_, _ = pc.WriteTo(resp, from)
			}
		}
	}()
	return d
}

// SetA makes the name resolve to ips (IPv4), answered in that order.
func (d *FakeDNS) SetA(ips ...string) { d.a.Store(&ips) }

// answer builds the reply to one query: its header and question, then an
// A record for each address SetA gave, when it asks for A.
func (d *FakeDNS) answer(q []byte) []byte {
	if len(q) < 12 || binary.BigEndian.Uint16(q[4:6]) != 1 {
		return nil
	}
	end := 12
	for end < len(q) && q[end] != 0 {
		end += int(q[end]) + 1
	}
	end += 5 // the root label, QTYPE, QCLASS
	if end > len(q) {
		return nil
	}
	qtype := binary.BigEndian.Uint16(q[end-4 : end-2])
	a := d.a.Load()
	resp := make([]byte, 12, 64)
	copy(resp, q[:2])       // id
	flags := uint16(0x8180) // a response, recursion desired and available
	if a == nil {
		flags |= 3 // NXDOMAIN
	}
	binary.BigEndian.PutUint16(resp[2:], flags)
	binary.BigEndian.PutUint16(resp[4:], 1) // one question
	resp = append(resp, q[12:end]...)
	if a != nil && qtype == 1 {
		binary.BigEndian.PutUint16(resp[6:], uint16(len(*a)))
		for _, ip := range *a {
			// Name: a pointer to the question's; A, IN, TTL 0, 4 bytes.
			resp = append(append(resp, 0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 0, 0, 4), net.ParseIP(ip).To4()...)
		}
	}
	return resp
}

// usedDNS is the FakeDNS the process's resolver asks, nil outside the
// tests that call UseResolver.
var usedDNS atomic.Pointer[FakeDNS]

// The process's resolver is set once, before any test runs, and asks
// usedDNS when a test set one, else the name servers of resolv.conf, as
// Go's own resolver does. UseResolver used to swap net.DefaultResolver
// for each test and put it back in a Cleanup: a call the test had given
// up on (Kitex's RPC timeout leaves it running in a goroutine of its own)
// still looked the name up, reading net.DefaultResolver, and the race
// detector failed the test on the Cleanup's write.
func init() {
	net.DefaultResolver = &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, address string) (net.Conn, error) {
		if d := usedDNS.Load(); d != nil {
			network, address = "udp", d.conn.LocalAddr().String()
		}
		var dialer net.Dialer
		return dialer.DialContext(ctx, network, address)
	}}
}

// UseResolver makes the process's resolver ask d alone, for this test.
func (d *FakeDNS) UseResolver(t *testing.T) {
	saved := usedDNS.Swap(d)
	t.Cleanup(func() { usedDNS.Store(saved) })
}

// lateName serves TCP on a local port under host name, which does not
// resolve (the process's resolver asks dns alone) until dns.SetA; it returns dns, name:port, and each connection accepted there.
func lateName(t *testing.T, name string) (dns *FakeDNS, hostPort string, conns <-chan struct{}) {
	t.Helper()
	dns = StartFakeDNS(t)
	dns.UseResolver(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return dns, net.JoinHostPort(name, port), accepted(t, ln)
}

// accepted reports each connection ln accepts.
func accepted(t *testing.T, ln net.Listener) <-chan struct{} {
	t.Helper()
	ch := make(chan struct{}, 16)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			ch <- struct{}{}
			c.Close()
		}
	}()
	return ch
}

func report(cli interface {
	ReportContributions(context.Context, *combo.ReportContributionsRequest, ...callopt.Option) (*combo.ReportContributionsResponse, error)
}) error {
	_, err := cli.ReportContributions(context.Background(), &combo.ReportContributionsRequest{
		Contributions: []*combo.Contribution{contribution(1)},
	})
	return err
}

// A host name that does not resolve when the client is built, nor at its
// first call, is dialed over TCP once it resolves: the same client, no
// rebuild.
func TestNewClientDialsANameOnceItResolves(t *testing.T) {
	dns, hp, conns := lateName(t, "combo-later.test")

	cli, err := NewClient([]string{hp}, kclient.WithRPCTimeout(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if err := report(cli); err == nil || !strings.Contains(err.Error(), "lookup combo-later.test") {
		t.Fatalf("call before the name resolves: %v, want its lookup's error", err)
	}
	select {
	case <-conns:
		t.Fatal("a connection arrived before the name resolved")
	default:
	}

	dns.SetA("127.0.0.1")
	_ = report(cli) // the listener answers nothing: the call fails, after the dial
	select {
	case <-conns:
	case <-time.After(waitFor):
		t.Fatalf("no TCP connection to %s within %s of its name resolving", hp, waitFor)
	}
}

// An IPv6 literal in brackets is dialed over TCP like any host:port.
func TestNewClientDialsIPv6Literals(t *testing.T) {
	ln, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	}
	conns := accepted(t, ln)
	cli, err := NewClient([]string{ln.Addr().String()}, kclient.WithRPCTimeout(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	_ = report(cli)
	select {
	case <-conns:
	case <-time.After(waitFor):
		t.Fatalf("no TCP connection to %s within %s", ln.Addr(), waitFor)
	}
}

// Kitex shares one balancer factory, resolver included, among all the
// clients of a process whose resolvers have the same name. A client built
// with Kitex's WithHostPorts while the name did not resolve (a Unix
// socket path for good) must not lend NewClient's client its resolver.
func TestNewClientSharesNoResolverWithWithHostPorts(t *testing.T) {
	dns, hp, conns := lateName(t, "combo-shared.test")

	other, err := comboservice.NewClient(ServiceName, kclient.WithHostPorts(hp), kclient.WithRPCTimeout(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	_ = report(other) // its balancer factory is built, keyed by its resolver's name
	dns.SetA("127.0.0.1")

	cli, err := NewClient([]string{hp}, kclient.WithRPCTimeout(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if err := report(cli); err != nil && strings.Contains(err.Error(), "unix") {
		t.Fatalf("NewClient's client dialed a Unix socket: %v", err)
	}
	select {
	case <-conns:
	case <-time.After(waitFor):
		t.Fatalf("no TCP connection to %s within %s", hp, waitFor)
	}
}
