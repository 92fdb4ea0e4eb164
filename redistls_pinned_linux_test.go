package main

import (
	"context"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/combo-service/combo-service/conf"
)

// A connection reset by the peer with nothing waiting (Redis's
// host answering a keep-alive probe, a process killed with bytes unread)
// reads as closed at the first check, not as open: that first check is the
// only one that sees the socket's error, and go-redis would then send a
// command on a dead connection and fail that request.
func TestPeerClosedAfterAReset(t *testing.T) {
	client, server := tcpPair(t)
	tc := server.(*net.TCPConn)
	tc.SetLinger(0)
	tc.Close() // RST, nothing sent before
	raw, err := client.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 5*time.Second, "the reset arrived", func() bool {
		var state uint8
		_ = raw.Control(func(fd uintptr) {
			if info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO); err == nil {
				state = info.State
			}
		})
		return state == unix.BPF_TCP_CLOSE
	})
	var got error
	_ = raw.Control(func(fd uintptr) { got = peerClosed(int(fd)) })
	if got == nil {
		t.Fatal("peerClosed = nil on a connection reset by the peer, want its error")
	}
}

// Connections dialed over TLS get go-redis's own keep-alives (30 s
// idle, 5 s apart, 3 probes): without them a pooled connection to a host
// that vanished without a FIN is never found dead before use.
func TestRedisTLSDialerSetsGoRedisKeepAlives(t *testing.T) {
	ln, caFile := tlsListener(t)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(io.Discard, c) }()
		}
	}()
	cfg := conf.Redis{TLS: true, TLSCAFile: caFile}
	d, err := newRedisTLSDialer(cfg.TLSConfigFrom, cfg.TLSFiles(), time.Second, zap.NewNop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := d.Dial(context.Background(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	raw, err := c.(interface{ NetConn() net.Conn }).NetConn().(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	_ = raw.Control(func(fd uintptr) {
		got["SO_KEEPALIVE"], _ = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_KEEPALIVE)
		got["TCP_KEEPIDLE"], _ = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_KEEPIDLE)
		got["TCP_KEEPINTVL"], _ = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_KEEPINTVL)
		got["TCP_KEEPCNT"], _ = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_KEEPCNT)
	})
	want := map[string]int{"SO_KEEPALIVE": 1, "TCP_KEEPIDLE": 30, "TCP_KEEPINTVL": 5, "TCP_KEEPCNT": 3}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("dialed TLS socket %v, want %v", got, want)
		}
	}
}
