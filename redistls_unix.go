//go:build unix

package main

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"syscall"
)

// checkable wraps c so that go-redis's pool can tell it closed.
func checkable(c *tls.Conn) net.Conn { return checkableTLSConn{c} }

// checkableTLSConn lets go-redis find a pooled TLS connection that Redis
// closed (a restart, a failover, CLIENT KILL, its idle timeout) before it
// sends a command on it. go-redis checks an idle connection by peeking at
// its socket, but not under TLS: there a byte waiting may be a TLS record
// with no reply in it (a session ticket), which its check would take for a
// pushed reply and wait on for ever. So each stale connection failed one
// request with EOF. Through this type the check learns only whether Redis
// closed the connection (peerClosed), never that bytes are waiting.
//
// go-redis also peeks through it to see whether a pushed reply waits
// (MaybeHasData: maintenance notifications, client-side caching); that
// now reads "nothing waiting" where it used to unwrap the socket, so such a
// notification is read with the next reply instead of just before the
// next command. The service asks for neither; go-redis turns maintenance
// notifications on by itself where a server offers them (Redis Enterprise
// and Cloud), and there a notice (MIGRATING: relax the timeouts) takes
// effect one command later.
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

// closedOnlyRawConn answers a read (go-redis's peek) with peerClosed's
// verdict, never running the peek itself: an error says the connection is
// done, nil that nothing waits.
type closedOnlyRawConn struct{ syscall.RawConn }

func (r closedOnlyRawConn) Read(func(fd uintptr) bool) error {
	var closed error
	if err := r.RawConn.Read(func(fd uintptr) bool {
		closed = peerClosed(int(fd))
		return true
	}); err != nil {
		return err
	}
	return closed
}

// peerClosed reports, without consuming anything, whether Redis has closed
// the connection on socket fd: io.EOF when it has, the socket's error when
// it failed, nil while it is open.
func peerClosed(fd int) error {
	var b [1]byte
	n, _, err := syscall.Recvfrom(fd, b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	switch {
	case n == 0 && err == nil:
		return io.EOF // nothing waiting before the end of the stream
	case err == syscall.EAGAIN || err == syscall.EWOULDBLOCK:
		return nil
	case err != nil:
		return err
	case finReceived(fd):
		// Bytes waiting, then the end: Redis closing a connection itself
		// (CLIENT KILL, its timeout) sends a TLS alert before it.
		return io.EOF
	default:
		return nil
	}
}
