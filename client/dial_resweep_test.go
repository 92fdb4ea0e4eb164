package client

// Tests pinning what a second mutation sweep of NewClient and its dialer
// found no test for.

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	kclient "github.com/cloudwego/kitex/client"
	"github.com/cloudwego/kitex/pkg/rpcinfo"

	"github.com/combo-service/combo-service/internal/testkitex"
	"github.com/combo-service/combo-service/kitex_gen/combo"
)

// callerService records the caller's name the server read from each
// request's header.
type callerService struct {
	slowService
	callers chan string
}

func (s *callerService) ReportContributions(ctx context.Context, req *combo.ReportContributionsRequest) (*combo.ReportContributionsResponse, error) {
	from := ""
	if ri := rpcinfo.GetRPCInfo(ctx); ri != nil && ri.From() != nil {
		from = ri.From().ServiceName()
	}
	select {
	case s.callers <- from:
	default:
	}
	return s.slowService.ReportContributions(ctx, req)
}

// The caller's name (kclient.WithClientBasicInfo) reaches the service,
// which counts RPCs by it in kitex_server_throughput: it travels in the
// TTHeader, written by Kitex's client TTHeader handler, the framing that
// also carries a stopping replica's "close this connection" mark.
// (Mutants: TTHeaderFramed made Framed, or dropped; the
// ClientTTHeaderHandler dropped.)
func TestNewClientSendsTheCallersNameInTTHeader(t *testing.T) {
	svc := &callerService{slowService: slowService{stop: make(chan struct{})}, callers: make(chan string, 1)}
	addr := testkitex.Serve(t, svc)
	t.Cleanup(func() { close(svc.stop) })
	cli, err := NewClient([]string{addr}, kclient.WithClientBasicInfo(&rpcinfo.EndpointBasicInfo{ServiceName: "activity-service"}))
	if err != nil {
		t.Fatal(err)
	}
	if err := report(cli); err != nil {
		t.Fatal(err)
	}
	select {
	case from := <-svc.callers:
		if from != "activity-service" {
			t.Fatalf("the service read caller %q, want %q (sent in the TTHeader)", from, "activity-service")
		}
	case <-time.After(waitFor):
		t.Fatal("the service got no call")
	}
}

// startSlowDNS serves d's answers, each delay after its query, until the
// test ends, and makes the process's resolver ask it.
func startSlowDNS(t *testing.T, delay time.Duration, ips ...string) {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	d := &FakeDNS{conn: pc}
	d.SetA(ips...)
	go func() {
		for {
			buf := make([]byte, 1500)
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			time.AfterFunc(delay, func() {
				if resp := d.answer(buf[:n]); resp != nil {
					_, _ = pc.WriteTo(resp, from)
				}
			})
		}
	}()
	d.UseResolver(t)
}

// A lookup that took most of the connect timeout leaves the dial only
// what is left of it, not a quarter of the timeout: the dial ends at the
// connect timeout, not up to a quarter past it. (Mutant:
// min(left, timeout/4) made timeout/4.)
func TestSpreadDialerEndsAtTheTimeoutAfterASlowLookup(t *testing.T) {
	const timeout = 2 * time.Second // a quarter: 500 ms
	port := blackholedPort(t, "127.0.0.2")
	startSlowDNS(t, timeout-150*time.Millisecond, "127.0.0.2") // 150 ms left to dial
	start := time.Now()
	c, err := spreadDialer{}.DialTimeout("tcp", net.JoinHostPort("combo-slow.test", strconv.Itoa(port)), timeout)
	took := time.Since(start)
	if c != nil {
		c.Close()
	}
	// The mutant's dial ends 350 ms past the timeout; 200 ms of margin
	// for a loaded machine.
	if err == nil || took > timeout+200*time.Millisecond {
		t.Fatalf("dial after a lookup of %s: %v after %s, want an error by the timeout %s",
			timeout-150*time.Millisecond, err, took, timeout)
	}
}
