package main

import (
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"net"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/alicebob/miniredis/v2/server"
	"go.uber.org/zap"

	"github.com/combo-service/combo-service/repo"
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
	srv.SetPreHook(onlyOwnScripts(repo.ScriptHashes()))
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
	// deadline, a client that reads on is not cut for the reply's size.
	// One reading slower than the pushes come still falls behind, and once
	// the sockets' buffers hold megabytes, Linux wakes a blocked write
	// only after about half of them are taken, which may take past the
	// deadline while the client reads: it is cut then (README says so).
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

// onlyOwnScripts is a miniredis hook refusing every Lua script but the
// service's own (known: their SHA1s). miniredis runs scripts in gopher-lua
// with its base and package libraries (loadfile, dofile, require, print)
// and no time bound: any client of the embedded Redis could read the
// host's files (a config's password shows in loadfile's parse error),
// write forged lines into the service's log, or hang it for good with an
// endless loop, which also kept SIGTERM from ending the process (the TTL
// countdown waits on the lock that loop holds). Real Redis sandboxes
// scripts and can kill them; miniredis cannot, so it runs nothing else.
func onlyOwnScripts(known map[string]bool) server.Hook {
	const refusal = "ERR combo-service's embedded Redis runs only the service's own scripts"
	own := func(script string) bool {
		sum := sha1.Sum([]byte(script))
		return known[hex.EncodeToString(sum[:])]
	}
	return func(c *server.Peer, cmd string, args ...string) bool {
		ok := true
		switch cmd {
		case "EVAL", "EVAL_RO":
			ok = len(args) > 0 && own(args[0])
		case "EVALSHA", "EVALSHA_RO":
			ok = len(args) > 0 && known[strings.ToLower(args[0])]
		case "SCRIPT":
			// LOAD of one of ours, EXISTS; not FLUSH or KILL.
			sub := ""
			if len(args) > 0 {
				sub = strings.ToUpper(args[0])
			}
			ok = sub == "EXISTS" || (sub == "LOAD" && len(args) > 1 && own(args[1]))
		case "FUNCTION", "FCALL", "FCALL_RO":
			ok = false
		}
		if ok {
			return false // dispatched as usual (AUTH first, where required)
		}
		c.WriteError(refusal)
		return true
	}
}
