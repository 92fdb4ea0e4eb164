//go:build unix

package main

import (
	"context"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/combo-service/combo-service/conf"
	"github.com/combo-service/combo-service/internal/testwait"
)

// go-redis's check of a pooled TLS connection, with bytes waiting on a
// healthy one (TLS records: a session ticket, a reply), learns nothing of
// them (its own check would take them for a pushed reply and peek at the
// TLS stream), and nothing is taken from the socket: the records read
// whole afterwards. A check that read a byte instead of peeking broke the
// connection's TLS stream.
func TestCheckableTLSConnHidesAndKeepsWaitingBytes(t *testing.T) {
	ln, caFile := tlsListener(t)
	const reply = "+PONG\r\n"
	wrote := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			wrote <- err
			return
		}
		defer c.Close()
		_, err = c.Write([]byte(reply))
		wrote <- err
		_, _ = io.Copy(io.Discard, c) // open until the client closes
	}()
	cfg := conf.Redis{TLS: true, TLSCAFile: caFile}
	d, err := newRedisTLSDialer(cfg.TLSConfigFrom, cfg.TLSFiles(), 5*time.Second, zap.NewNop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := d.Dial(context.Background(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := testwait.Receive(t, "the server's reply written", wrote); err != nil {
		t.Fatal(err)
	}
	sock, err := c.(interface{ NetConn() net.Conn }).NetConn().(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	testwait.For(t, "bytes waiting on the socket", func() bool {
		var n int
		_ = sock.Control(func(fd uintptr) {
			var b [1]byte
			n, _, _ = syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		})
		return n > 0
	})

	sc, ok := c.(syscall.Conn)
	if !ok {
		t.Fatal("the dialed TLS connection has no SyscallConn: go-redis cannot check it")
	}
	for range 2 { // go-redis checks it at each take from the pool
		raw, err := sc.SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		peeked := 0
		err = raw.Read(func(fd uintptr) bool { // go-redis's connCheck
			var b [1]byte
			peeked, _, _ = syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
			return true
		})
		if err != nil || peeked > 0 {
			t.Fatalf("go-redis's check of a healthy connection: %v, %d byte seen waiting; want open, nothing waiting", err, peeked)
		}
	}
	if err := c.SetReadDeadline(time.Now().Add(testwait.Deadline)); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(reply))
	if _, err := io.ReadFull(c, got); err != nil || string(got) != reply {
		t.Fatalf("read after the checks: %q, %v; want %q", got, err, reply)
	}
}
