package client

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/cloudwego/netpoll"
)

// spreadDialer dials a name's addresses of the network asked for, as
// netpoll connections, and its errors name the address dialed.
func TestSpreadDialer(t *testing.T) {
	dns := StartFakeDNS(t)
	dns.UseResolver(t)
	// Connections complete in the listener's backlog: it need not accept.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	hp := net.JoinHostPort("combo-dial.test", port)
	var d spreadDialer
	if _, err := d.DialTimeout("tcp", hp, time.Second); err == nil ||
		!strings.Contains(err.Error(), "dial tcp "+hp+": lookup combo-dial.test") {
		t.Fatalf("dial before the name resolves: %v, want its lookup's error naming %s", err, hp)
	}

	dns.SetA("127.0.0.1") // an A record, and no AAAA
	for _, dial := range []struct {
		network string
		timeout time.Duration
	}{{"tcp", time.Second}, {"tcp4", time.Second}, {"tcp", 0}} {
		c, err := d.DialTimeout(dial.network, hp, dial.timeout)
		if err != nil {
			t.Fatalf("dial %s %s (timeout %s): %v", dial.network, hp, dial.timeout, err)
		}
		if _, ok := c.(netpoll.Connection); !ok {
			t.Errorf("dial %s %s: %T, want a netpoll connection for Kitex's netpoll transport", dial.network, hp, c)
		}
		c.Close()
	}
	if _, err := d.DialTimeout("tcp6", hp, time.Second); err == nil ||
		!strings.Contains(err.Error(), "dial tcp6 "+hp+": address combo-dial.test: no suitable address found") {
		t.Fatalf("dial tcp6 to a name with no AAAA record: %v, want no suitable address, naming %s", err, hp)
	}

	// An IP literal is netpoll's to dial, as it is.
	c, err := d.DialTimeout("tcp", ln.Addr().String(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
}
