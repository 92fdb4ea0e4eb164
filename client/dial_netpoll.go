//go:build !windows

package client

import (
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/cloudwego/netpoll"
)

// dialOne is netpoll's own dial of one address, returning a nil net.Conn
// with an error (netpoll's is a nil *TCPConnection in a non-nil
// interface).
func dialOne(network, address string, timeout time.Duration) (net.Conn, error) {
	c, err := netpoll.DialConnection(network, address, timeout)
	if err != nil {
		return nil, refusedDial(err)
	}
	return c, nil
}

// refusedDial names what netpoll's dial error means: a connection refused
// (or reset) while its non-blocking connect waits is reported as
// ErrConnClosed, "connection has been closed by peer", and a drop's
// reason then sent an operator looking for a replica that closes
// connections rather than one that is not listening.
func refusedDial(err error) error {
	if errors.Is(err, netpoll.ErrConnClosed) {
		return fmt.Errorf("%w (netpoll's words for a connection refused or reset while connecting)", err)
	}
	return err
}
