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

// startEmbedded runs mr on its own listener at addr, each connection's
// output queued within Redis's limits for a subscriber (outputQueuedConn),
// each client cut at a command that would crash mr (checkedConn), and
// returns the address it listens on and how to stop it: the listener
// first, then mr with every connection. log (sampled) hears of connections
// it could not accept and of clients cut.
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
	var queues outputQueues
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
			remote := conn.RemoteAddr().String()
			q := newOutputQueuedConn(conn, pubsubOutputLimits, func(queued int) {
				log.Warn("the embedded Redis cut a subscriber that fell behind, as Redis cuts one past its output limit",
					zap.String("client", remote), zap.Int("queued_bytes", queued))
			})
			queues.add(q)
			srv.ServeConn(&checkedConn{Conn: q, cut: func(err error) {
				log.Warn("the embedded Redis cut a client whose command would have crashed it",
					zap.String("client", remote), zap.Error(err))
			}})
		}
	}()
	stop := func() {
		ln.Close()
		<-done
		queues.closeAll()
		mr.Close()
	}
	return ln.Addr().String(), stop, nil
}

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

// embeddedTTLTick is how often the embedded Redis counts its TTLs down:
// a key set within a tick is charged the whole tick, so keys expire up to
// a tick early (or late). What relies on expiry keeps more than a tick of
// margin: a dedupe set lives 2 s past its last lookup (repo/report.lua),
// a window 10 s past window.stale, and a flush tells a window's expired
// data from deleted data a tick (and repo.IDsAhead) before its TTL
// (repo.Settings.ExpiresEarly). Each tick walks every key under miniredis's lock
// (about 13 ms for 50,000 keys, 50 ms under -race), so a second keeps
// that to about 1% of the time where 100 ms made it 13-50%.
const embeddedTTLTick = time.Second

// countDownTTLs makes mr's TTLs run with the clock, once per tick, until
// the returned stop is called. miniredis counts TTLs down only when told
// to: without it no dedupe set or window ever expired and memory grew with
// every id reported. Its ClockTTL does it on every command, sorting every
// key each time, which made one report cost time in proportion to the keys
// held: a batch of 1000 new windows took 3 s, past redis.timeout and the
// client's RPC timeout, and with a thousand windows open a batch of 50
// took about 500 ms. Here the walk is paid once a tick, off the commands.
// Shutdown order: stopped by openRedis's closeAll (run's deferred
// closeRedis, the last of run's stops but the count of the libraries'
// thinned log lines, deferred before it), after the clients close and just
// before the embedded Redis itself.
func countDownTTLs(mr *miniredis.Miniredis, tick time.Duration) (stop func()) {
	done := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTicker(tick)
		defer t.Stop()
		last := time.Now()
		for {
			select {
			case <-done:
				return
			case now := <-t.C:
				mr.FastForward(now.Sub(last))
				last = now
			}
		}
	}()
	return func() { close(done); <-exited }
}
