package testredis

import (
	"net"
	"sync"
	"testing"
)

// Proxy listens on a free loopback port and returns its address. For each
// connection it accepts it dials addr and calls serve with both, on a
// goroutine of its own, to pass on between them what it will: tests use
// it to hold, cut or time what reaches Redis or comes back. When the test
// ends the listener and every connection are closed, which ends serve's
// copies.
func Proxy(tb testing.TB, addr string, serve func(client, server net.Conn)) string {
	tb.Helper()
	return ProxyTo(tb, func() string { return addr }, serve)
}

// ProxyTo is Proxy dialing, for each connection, the address addr returns
// then: a name a failover moves, as DNS does at each dial.
func ProxyTo(tb testing.TB, addr func() string, serve func(client, server net.Conn)) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	tb.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	go func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			server, err := net.Dial("tcp", addr())
			if err != nil {
				client.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, client, server)
			mu.Unlock()
			go serve(client, server)
		}
	}()
	return ln.Addr().String()
}

// ClosedAddr is a loopback address nothing listens on (a port just freed):
// a dial of it is refused at once.
func ClosedAddr(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}
