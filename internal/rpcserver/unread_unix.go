//go:build unix

package rpcserver

import (
	"net"
	"syscall"
)

// shutDown ends both directions of conn's socket before it is closed.
// netpoll closes a connection only once its request's handler returns,
// and reads all the peer sends until then: after a shutdown the poller
// sees the end of the stream at once, and the peer's writes fail.
func shutDown(conn net.Conn) {
	if f, ok := conn.(interface{ Fd() int }); ok {
		_ = syscall.Shutdown(f.Fd(), syscall.SHUT_RDWR) // fails only on a socket already gone
	}
}
