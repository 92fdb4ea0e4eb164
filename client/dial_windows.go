package client

import (
	"net"
	"time"
)

// dialOne dials one address with Go's own dialer: on Windows netpoll has
// no dialer (its NewDialer returns nil), and Kitex's transport there,
// gonet, takes any net.Conn. A timeout of 0 is none, as netpoll's.
func dialOne(network, address string, timeout time.Duration) (net.Conn, error) {
	return net.DialTimeout(network, address, timeout)
}
