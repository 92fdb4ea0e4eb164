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

// fakeDNS answers every A query with 127.0.0.1 once resolves is set, and
// NXDOMAIN before: a name that is not in DNS yet, then is.
type fakeDNS struct {
	conn     net.PacketConn
	resolves atomic.Bool
}

func startFakeDNS(t *testing.T) *fakeDNS {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := &fakeDNS{conn: pc}
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

// answer builds the reply to one query: its header and question, then an
// A record for the question's name when resolves is set and it asks for A.
func (d *fakeDNS) answer(q []byte) []byte {
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
	resp := make([]byte, 12, 64)
	copy(resp, q[:2])       // id
	flags := uint16(0x8180) // a response, recursion desired and available
	if !d.resolves.Load() {
		flags |= 3 // NXDOMAIN
	}
	binary.BigEndian.PutUint16(resp[2:], flags)
	binary.BigEndian.PutUint16(resp[4:], 1) // one question
	resp = append(resp, q[12:end]...)
	if d.resolves.Load() && qtype == 1 {
		binary.BigEndian.PutUint16(resp[6:], 1) // one answer
		resp = append(resp, 0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 0, 0, 4, 127, 0, 0, 1)
	}
	return resp
}

// useResolver makes the process's default resolver ask d alone, for this
// test.
func (d *fakeDNS) useResolver(t *testing.T) {
	saved := net.DefaultResolver
	net.DefaultResolver = &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var dialer net.Dialer
		return dialer.DialContext(ctx, "udp", d.conn.LocalAddr().String())
	}}
	t.Cleanup(func() { net.DefaultResolver = saved })
}

// lateName serves TCP on a local port under host name, which does not
// resolve (the process's resolver asks dns alone) until dns.resolves is
// set; it returns dns, name:port, and each connection accepted there.
func lateName(t *testing.T, name string) (dns *fakeDNS, hostPort string, conns <-chan struct{}) {
	t.Helper()
	dns = startFakeDNS(t)
	dns.useResolver(t)
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

	dns.resolves.Store(true)
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
	dns.resolves.Store(true)

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
