package main

import (
	"errors"
	"net"
	"time"

	"github.com/alicebob/miniredis/v2"
	"go.uber.org/zap"
)

// embeddedWriteTimeout bounds each write of the embedded Redis to a client.
// miniredis hands a PUBLISH to each subscriber's writer under its one
// global lock and writes with no deadline, so a subscriber that stops
// reading (the logged redis-cli line suspended with Ctrl-Z, or piped
// into a pager) froze it once the socket's buffers filled: every report
// failed, /readyz too, and the process could not stop. Real Redis cuts such
// a client (client-output-buffer-limit pubsub); here a client that takes
// no byte for this long, with the kernel's megabytes of buffer full, is
// cut alike. Until it is, a PUBLISH to it holds miniredis's lock, so the
// embedded Redis answers nothing for that second (reports then fail
// UNAVAILABLE after redis.timeout).
const embeddedWriteTimeout = time.Second

// startEmbedded runs mr on its own listener at addr, each connection's
// writes bounded by embeddedWriteTimeout, and returns the address it
// listens on and how to stop it: the listener first, then mr with every
// connection. log (sampled) hears of connections it could not accept.
func startEmbedded(mr *miniredis.Miniredis, addr string, log *zap.Logger) (string, func(), error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, err
	}
	// Dial starts mr without a listener of its own (the connection it
	// returns is an in-memory pipe, not needed).
	c, err := mr.Dial()
	if err != nil {
		ln.Close()
		return "", nil, err
	}
	c.Close()
	srv := mr.Server()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			conn, err := ln.Accept()
			if errors.Is(err, net.ErrClosed) {
				return
			}
			if err != nil { // out of file descriptors: as net/http, wait and go on
				log.Warn("the embedded Redis could not accept a connection; trying again in 10ms", zap.Error(err))
				time.Sleep(10 * time.Millisecond)
				continue
			}
			srv.ServeConn(writeBoundedConn{Conn: conn, timeout: embeddedWriteTimeout})
		}
	}()
	stop := func() {
		ln.Close()
		<-done
		mr.Close()
	}
	return ln.Addr().String(), stop, nil
}

// writeBoundedConn is a connection whose writes must go on: each
// writeChunk of one within timeout. One that does not closes it, so its
// reader ends and the server lets it go (a subscriber's subscriptions with
// it).
type writeBoundedConn struct {
	net.Conn
	timeout time.Duration
}

func (c writeBoundedConn) Write(b []byte) (int, error) {
	// miniredis writes a large reply whole: in chunks, each with its own
	// deadline, a client that reads on, however slowly, is not cut.
	written := 0
	for len(b) > 0 {
		chunk := b[:min(len(b), writeChunk)]
		if err := c.Conn.SetWriteDeadline(time.Now().Add(c.timeout)); err != nil {
			return written, err
		}
		n, err := c.Conn.Write(chunk)
		written += n
		if err != nil {
			c.Conn.Close()
			return written, err
		}
		b = b[n:]
	}
	return written, nil
}

// writeChunk is the most written under one deadline: a fraction of a
// loopback socket's buffers, so a deadline passes only when the client
// takes nothing.
const writeChunk = 64 << 10
