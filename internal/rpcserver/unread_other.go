//go:build !unix

package rpcserver

import "net"

// shutDown: netpoll serves on Unix only.
func shutDown(net.Conn) {}
