package client

import (
	"errors"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"syscall"
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

// An address that refuses is the error the dial returns, not the
// "timeout spent looking the name up" that is meant for none tried.
func TestSpreadDialerReturnsTheRefusingAddressError(t *testing.T) {
	dns := StartFakeDNS(t)
	dns.UseResolver(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	ln.Close() // refused from now on
	dns.SetA("127.0.0.1")
	_, err = spreadDialer{}.DialTimeout("tcp", net.JoinHostPort("combo-dial.test", port), time.Second)
	if err == nil || errors.Is(err, os.ErrDeadlineExceeded) || !strings.Contains(err.Error(), "1 of 1 addresses tried: dial tcp 127.0.0.1:"+port) {
		t.Fatalf("dial of a refusing address: %v, want that address's own error, 1 of 1 tried", err)
	}
}

// With many records each address gets at least a quarter of the connect
// timeout (net.Dialer's equal share would give 8 records an eighth each,
// too short for a replica that is up but a little slow), and no more: 8
// dead records and a 400 ms timeout are 4 tries of 100 ms, not 8 of 50
// nor 2 of 200.
func TestSpreadDialerGivesEachAddressAQuarterAtLeast(t *testing.T) {
	dns := StartFakeDNS(t)
	dns.UseResolver(t)
	ips := []string{"127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5", "127.0.0.6", "127.0.0.7", "127.0.0.8", "127.0.0.9"}
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	for _, ip := range ips {
		Blackhole(t, ip, port)
	}
	dns.SetA(ips...)
	_, err = spreadDialer{}.DialTimeout("tcp", net.JoinHostPort("combo-dial.test", strconv.Itoa(port)), 400*time.Millisecond)
	if err == nil {
		t.Fatal("dial of dead records succeeded")
	}
	// 4 of 8 tried, or 3 if the lookup and the dials overran the timeout
	// by 100 ms.
	tried := regexp.MustCompile(`(\d+) of 8 addresses tried`).FindStringSubmatch(err.Error())
	if tried == nil {
		t.Fatalf("%v: the error does not say how many addresses were tried", err)
	}
	switch n, _ := strconv.Atoi(tried[1]); {
	case n > 4:
		t.Fatalf("%v: each address got less than a quarter of the timeout", err)
	case n < 3:
		t.Fatalf("%v: each address got more than a quarter of the timeout", err)
	}
}

// blackholedPort blackholes a port free on ip (Blackhole) and returns it.
func blackholedPort(t *testing.T, ip string) int {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	Blackhole(t, ip, port)
	return port
}

// Blackhole listens on ip:port with its accept queue full and never
// accepts: the kernel drops further SYNs, as for a replica whose packets
// are dropped.
func Blackhole(t *testing.T, ip string, port int) {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	// As net.Listen does: a connection to an earlier listener on ip:port
	// that the server side closed first is left in TIME_WAIT there for a
	// minute, and without SO_REUSEADDR the bind fails "address already in
	// use".
	if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1); err != nil {
		t.Fatal(err)
	}
	sa := &syscall.SockaddrInet4{Port: port}
	copy(sa.Addr[:], net.ParseIP(ip).To4())
	if err := syscall.Bind(fd, sa); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort(ip, strconv.Itoa(port))
	for i := 0; ; i++ {
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err != nil {
			return // a SYN went unanswered: the queue is full
		}
		t.Cleanup(func() { c.Close() })
		if i == 10 {
			t.Fatalf("%s still takes connections after %d", addr, i+1)
		}
	}
}
