package main

import (
	"crypto/tls"
	"net"
	"testing"

	"github.com/combo-service/combo-service/internal/testredis"
)

// tcpPair is both ends of one loopback TCP connection, closed when the
// test ends.
func tcpPair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	server, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { server.Close() })
	return client, server
}

// tlsListener is a loopback TLS listener with a server certificate of
// fresh test files, closed when the test ends, and the CA file that
// verifies it.
func tlsListener(t *testing.T) (ln net.Listener, caFile string) {
	t.Helper()
	pki := testredis.NewTLSFiles(t, t.TempDir())
	cert, err := tls.LoadX509KeyPair(pki.ServerCert, pki.ServerKey)
	if err != nil {
		t.Fatal(err)
	}
	ln, err = tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln, pki.CA
}
