package rpcserver

import (
	"context"
	"net"
	"sync"
	"time"

	"github.com/cloudwego/kitex/pkg/klog"
	"github.com/cloudwego/kitex/pkg/remote"
	"github.com/cloudwego/netpoll"
)

// unreadCloser closes a connection whose unread bytes pass limit at any
// time, not only when its next request is decoded (guardedCodec's check).
// netpoll reads whatever a peer sends into the connection's buffer, with
// no bound, while the server handles a request or waits to write its
// answer; nothing is decoded meanwhile. A peer that asked for a large
// answer, read none of it and kept sending made the server hold 1.3 GB on
// one connection through the write timeout (ReadWriteTimeout, 5 s), past
// the 64 MB that MaxAheadBytes promises. netpoll calls nothing when bytes
// arrive while a request runs, nor closes the connection before its
// handler returns (shutDown), so one goroutine looks at every
// connection's unread length (an atomic read) each interval, and runs only
// while connections are open: 10,000 of them cost a fraction of a
// millisecond per look.
type unreadCloser struct {
	passInbound
	limit    int
	interval time.Duration

	mu      sync.Mutex
	conns   map[net.Conn]netpoll.Reader
	running bool // the watching goroutine runs; it ends when conns is empty
}

func newUnreadCloser(limit int, interval time.Duration) *unreadCloser {
	return &unreadCloser{limit: limit, interval: interval, conns: make(map[net.Conn]netpoll.Reader)}
}

var _ remote.InboundHandler = (*unreadCloser)(nil)

// buffered is a netpoll connection (the only transport the service
// serves); another net.Conn is not watched.
type buffered interface{ Reader() netpoll.Reader }

func (u *unreadCloser) OnActive(ctx context.Context, conn net.Conn) (context.Context, error) {
	b, ok := conn.(buffered)
	if !ok {
		return ctx, nil
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	u.conns[conn] = b.Reader()
	if !u.running {
		u.running = true
		go u.watch()
	}
	return ctx, nil
}

func (u *unreadCloser) OnInactive(ctx context.Context, conn net.Conn) context.Context {
	u.mu.Lock()
	delete(u.conns, conn)
	u.mu.Unlock()
	return ctx
}

// watch closes each connection over the limit, every interval, until no
// connection is open.
func (u *unreadCloser) watch() {
	t := time.NewTicker(u.interval)
	defer t.Stop()
	type over struct {
		conn net.Conn
		n    int
	}
	var cut []over
	for range t.C {
		u.mu.Lock()
		if len(u.conns) == 0 {
			u.running = false
			u.mu.Unlock()
			return
		}
		for conn, r := range u.conns {
			if n := r.Len(); n > u.limit {
				// Under the lock, while conn is still here: netpoll
				// closes its fd only after OnInactive, which waits for
				// the lock, so the fd is still conn's. Later, the number
				// could be another connection's, accepted since.
				shutDown(conn)
				cut = append(cut, over{conn, n})
				delete(u.conns, conn) // closed once; OnInactive finds it gone
			}
		}
		u.mu.Unlock()
		for _, o := range cut {
			klog.Warnf("combo-service: closed a connection from %s holding %d bytes it sent and the server "+
				"has not read, more than the %d it may (a request and MaxAheadBytes sent ahead): "+
				"it kept sending while a request ran or its answer waited", o.conn.RemoteAddr(), o.n, u.limit)
			_ = o.conn.Close()
		}
		cut = cut[:0]
	}
}
