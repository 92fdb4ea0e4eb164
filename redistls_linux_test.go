package main

import (
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A socket with bytes waiting (a TLS alert) is closed once the peer has
// ended the connection, whether by a FIN (CLOSE_WAIT) or later by a reset:
// a keep-alive probe on a connection Redis closed a minute before gets one
// once Redis's side is gone (or times out unanswered), and the socket is
// then in CLOSE, the alert still waiting. Only an established one is open.
func TestPeerClosedWithBytesWaiting(t *testing.T) {
	for _, c := range []struct {
		name   string
		end    func(*net.TCPConn)
		state  uint8
		closed bool
	}{
		{"open", func(*net.TCPConn) {}, unix.BPF_TCP_ESTABLISHED, false},
		{"FIN", func(c *net.TCPConn) { c.Close() }, unix.BPF_TCP_CLOSE_WAIT, true},
		{"FIN then reset", func(c *net.TCPConn) { c.CloseWrite(); c.SetLinger(0); c.Close() }, unix.BPF_TCP_CLOSE, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			client, server := tcpPair(t)
			if _, err := server.Write([]byte{0x15}); err != nil { // an alert record's first byte
				t.Fatal(err)
			}
			c.end(server.(*net.TCPConn))
			raw, err := client.(syscall.Conn).SyscallConn()
			if err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(5 * time.Second)
			var got error
			for {
				var state uint8
				var waiting int
				if err := raw.Control(func(fd uintptr) {
					info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
					if err == nil {
						state = info.State
					}
					var b [1]byte
					waiting, _, _ = syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
					got = peerClosed(int(fd))
				}); err != nil {
					t.Fatal(err)
				}
				if state == c.state && waiting == 1 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("socket in TCP state %d with %d byte waiting, want state %d with the byte", state, waiting, c.state)
				}
				time.Sleep(time.Millisecond)
			}
			if (got != nil) != c.closed {
				t.Fatalf("peerClosed = %v, want closed %v", got, c.closed)
			}
		})
	}
}

// A peer that closed with nothing waiting reads as closed (io.EOF): the
// clean end of a connection, beside the one with bytes waiting above.
func TestPeerClosedWithNothingWaiting(t *testing.T) {
	client, server := tcpPair(t)
	server.Close()
	raw, err := client.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var got error
	waitUntil(t, 5*time.Second, "the peer's FIN read as io.EOF", func() bool {
		_ = raw.Control(func(fd uintptr) { got = peerClosed(int(fd)) })
		return got == io.EOF
	})
}
