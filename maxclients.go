package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"syscall"
	"time"
)

// maxClientsReply is what Redis writes to a connection it accepts at its
// maxclients, before it closes it and whatever the client sent. Under TLS
// it cannot: the handshake is not done, so it closes the connection
// unanswered and the handshake ends in EOF or a reset.
var maxClientsReply = []byte("-ERR max number of clients reached")

// maxClientsHold is how long after a refusal at maxclients new
// connections to that address fail at once, undialed.
const maxClientsHold = time.Second

// maxClientsError is a connection Redis refused at its maxclients: it
// reads as unavailable (no redis.Error), and names the cause, which
// go-redis lost: it took the reply for a Redis without HELLO and went on,
// so the command after it failed with "write: broken pipe", "EOF" or
// "connection reset by peer".
type maxClientsError struct {
	addr string
	// tls is the TLS handshake's EOF or reset, which is what maxclients
	// looks like there; nil for the reply itself.
	tls error
}

func (e *maxClientsError) Error() string {
	if e.tls != nil {
		return e.addr + ": TLS handshake cut (" + e.tls.Error() + "): the server closed the connection unanswered, as Redis does at its maxclients " +
			"(ERR max number of clients reached, which it cannot send before the handshake; its INFO stats rejected_connections counts them)"
	}
	return e.addr + ": ERR max number of clients reached: Redis takes no more connections (its maxclients)"
}

// Unwrap keeps the TLS case's own error.
func (e *maxClientsError) Unwrap() error { return e.tls }

// handshakeCut says a TLS dial failed because the server closed the
// connection in the handshake: an EOF, or a reset when the closed
// socket still held the client's hello.
func handshakeCut(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)
}

// refusals remembers, by address, the last refusal at maxclients and
// until when new dials there fail at once with it (maxClientsHold): each
// refused dial is a TCP connection Redis accepts and closes, and without
// the hold every report that needed a connection dialed one (about 1,500
// a second from one replica under 16 callers, 7% of Redis's core,
// against a Redis already full). Dials failing count in go-redis's own
// breaker too, which after a pool's size of them in a row dials once a
// second until one connects. (Over TLS each refusal was a dial failing
// already, spaced by that breaker only after a pool's size of them.)
type refusals struct {
	mu   sync.Mutex
	last map[string]refusal
}

type refusal struct {
	err   *maxClientsError
	until time.Time
}

func (r *refusals) refused(e *maxClientsError) {
	r.mu.Lock()
	r.last[e.addr] = refusal{err: e, until: time.Now().Add(maxClientsHold)}
	r.mu.Unlock()
}

// held returns the refusal new dials to addr fail with now, if any.
func (r *refusals) held(addr string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if l, ok := r.last[addr]; ok {
		if time.Now().Before(l.until) {
			return l.err
		}
		delete(r.last, addr)
	}
	return nil
}

// namingMaxClients wraps dial (go-redis's Options.Dialer) so that a
// connection Redis refuses at its maxclients fails with a
// maxClientsError, and new ones to that address fail with it at once for
// maxClientsHold. tls says dial makes TLS connections, whose handshake is
// cut there.
func namingMaxClients(dial dialFunc, tls bool) dialFunc {
	r := &refusals{last: make(map[string]refusal)}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if err := r.held(addr); err != nil {
			return nil, err
		}
		c, err := dial(ctx, network, addr)
		if err != nil {
			if tls && handshakeCut(err) {
				e := &maxClientsError{addr: addr, tls: err}
				r.refused(e)
				return nil, e
			}
			return nil, err
		}
		mc := &maxClientsConn{Conn: c, addr: addr, r: r}
		if _, ok := c.(syscall.Conn); ok {
			// go-redis checks a pooled connection through its socket
			// before reusing it; a wrapper without this would hide it.
			return maxClientsSyscallConn{mc}, nil
		}
		return mc, nil
	}
}

// maxClientsConn looks at the first bytes read on a connection (the
// answer to go-redis's HELLO) for maxClientsReply. A reply cut before its
// end in that first read goes through as before.
type maxClientsConn struct {
	net.Conn
	addr string
	r    *refusals
	read bool // the first bytes were read: go-redis reads one at a time
}

func (c *maxClientsConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if !c.read && n > 0 {
		c.read = true
		if bytes.HasPrefix(p[:n], maxClientsReply) {
			e := &maxClientsError{addr: c.addr}
			c.r.refused(e)
			return 0, e
		}
	}
	return n, err
}

// maxClientsSyscallConn is a maxClientsConn whose socket go-redis can
// check.
type maxClientsSyscallConn struct{ *maxClientsConn }

func (c maxClientsSyscallConn) SyscallConn() (syscall.RawConn, error) {
	return c.Conn.(syscall.Conn).SyscallConn()
}
