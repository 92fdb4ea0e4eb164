//go:build !unix

package main

import (
	"crypto/tls"
	"net"
)

// checkable: go-redis checks idle connections only on Unix.
func checkable(c *tls.Conn) net.Conn { return c }
