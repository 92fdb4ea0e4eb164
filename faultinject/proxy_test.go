//go:build unix

package faultinject

import (
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// gateProxy is a TCP proxy between the replicas and Redis that the test can
// shut ("cut": every proxied connection is closed, new ones are accepted
// and closed at once) and open again.
//
// Why the Redis-outage scenario needs it: pub/sub is at-most-once. If
// redis-server is killed while replicas are flushing, a PUBLISH can be
// persisted (the window deleted, AOF fsynced) and its bytes to the
// subscriber lost with the process; and after the restart a replica's
// retried flush can publish before the test's subscriber has re-subscribed.
// Either way the test would miss a push the service did make. Cutting the
// replicas off first, killing Redis only once nothing is in flight, and
// letting them back only after the subscriber is back makes the observer
// exact, while the replicas see what an outage looks like: connections
// dropped, then refused, then back.
type gateProxy struct {
	t      *testing.T
	ln     net.Listener
	target string

	mu     sync.Mutex
	open   bool
	closed bool
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

func newGateProxy(t *testing.T, target string) *gateProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &gateProxy{t: t, ln: ln, target: target, open: true, conns: map[net.Conn]struct{}{}}
	g.wg.Add(1)
	go g.serve()
	t.Cleanup(g.close)
	return g
}

func (g *gateProxy) Addr() string { return g.ln.Addr().String() }

func (g *gateProxy) serve() {
	defer g.wg.Done()
	for {
		down, err := g.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		g.mu.Lock()
		open := g.open && !g.closed
		g.mu.Unlock()
		if !open {
			down.Close()
			continue
		}
		up, err := net.DialTimeout("tcp", g.target, time.Second)
		if err != nil {
			down.Close()
			continue
		}
		g.mu.Lock()
		if !g.open || g.closed { // cut while dialing
			g.mu.Unlock()
			down.Close()
			up.Close()
			continue
		}
		g.conns[down], g.conns[up] = struct{}{}, struct{}{}
		g.mu.Unlock()
		g.wg.Add(2)
		go g.pipe(down, up)
		go g.pipe(up, down)
	}
}

// pipe copies src to dst; when either side ends, both are closed.
func (g *gateProxy) pipe(dst, src net.Conn) {
	defer g.wg.Done()
	_, _ = io.Copy(dst, src)
	g.mu.Lock()
	delete(g.conns, dst)
	delete(g.conns, src)
	g.mu.Unlock()
	dst.Close()
	src.Close()
}

// cut drops every proxied connection and refuses new ones until restore.
func (g *gateProxy) cut() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.open = false
	for c := range g.conns {
		c.Close()
	}
}

func (g *gateProxy) restore() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.open = true
}

func (g *gateProxy) close() {
	g.mu.Lock()
	g.closed = true
	for c := range g.conns {
		c.Close()
	}
	g.mu.Unlock()
	g.ln.Close()
	g.wg.Wait()
}
