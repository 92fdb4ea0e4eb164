//go:build unix

package main

import (
	"crypto/tls"
	"errors"
	"net"
	"syscall"
)

// checkable wraps c so that go-redis's pool can tell it closed.
func checkable(c *tls.Conn) net.Conn { return checkableTLSConn{c} }

// checkableTLSConn lets go-redis find a pooled TLS connection that Redis
// closed (a restart, a failover) before it sends a command on it. go-redis
// checks an idle connection by peeking at its socket, but not under TLS:
// there a byte waiting may be a TLS record with no reply in it (a session
// ticket), which its check would take for a pushed reply and wait on for
// ever. So, after Redis restarted, each stale connection failed one
// request with EOF. Through this type the check sees only what is certain
// on a TLS socket: the peer closed it (nothing waiting, end of stream), or
// it failed. Bytes waiting count as healthy, as every TLS connection did
// before.
type checkableTLSConn struct{ *tls.Conn }

// SyscallConn is what go-redis's check peeks through.
func (c checkableTLSConn) SyscallConn() (syscall.RawConn, error) {
	sc, ok := c.NetConn().(syscall.Conn)
	if !ok {
		return nil, errors.New("redis TLS connection over a transport without a socket")
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return nil, err
	}
	return closedOnlyRawConn{raw}, nil
}

// closedOnlyRawConn runs a peek (f) on the socket only when the socket is
// closed or failed, where f finds the same; otherwise it returns without
// running f, which go-redis reads as "nothing waiting".
type closedOnlyRawConn struct{ syscall.RawConn }

func (r closedOnlyRawConn) Read(f func(fd uintptr) bool) error {
	ended := false
	if err := r.RawConn.Read(func(fd uintptr) bool {
		var b [1]byte
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		ended = n == 0 && err == nil || err != nil && err != syscall.EAGAIN && err != syscall.EWOULDBLOCK
		return true
	}); err != nil || !ended {
		return err
	}
	return r.RawConn.Read(f)
}
