package rpcserver

import (
	"cmp"
	"context"
	"net"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/cloudwego/kitex/pkg/klog"
	"github.com/cloudwego/kitex/pkg/remote"
	"github.com/cloudwego/netpoll"
	"github.com/prometheus/client_golang/prometheus"
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
//
// The bound is per connection; in all, at server.max_connections of them,
// peers could make a replica hold terabytes. total bounds what every
// connection holds unread together: past it, the connections holding the
// most are closed until the rest fit, so one peer opening many
// connections, each stalled near its own bound, cannot run the replica
// out of memory, while many callers of ordinary size never meet it.
type unreadCloser struct {
	passInbound
	limit    int
	total    int
	interval time.Duration

	panics prometheus.Counter // a round that panicked; nil: not counted

	mu      sync.Mutex
	conns   map[net.Conn]netpoll.Reader
	running bool // the watching goroutine runs; it ends when conns is empty
}

func newUnreadCloser(limit, total int, interval time.Duration, panics prometheus.Counter) *unreadCloser {
	return &unreadCloser{limit: limit, total: total, interval: interval, panics: panics,
		conns: make(map[net.Conn]netpoll.Reader)}
}

// over is a connection and the bytes it holds unread; n is oddReader
// when its reader panicked.
type over struct {
	conn net.Conn
	n    int
}

// oddReader is over.n for a connection whose reader panicked when asked
// its length.
const oddReader = -1

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
	var cut, held []over
	for range t.C {
		var goOn bool
		if cut, held, goOn = u.round(cut[:0], held[:0]); !goOn {
			return
		}
	}
}

// round is one look at every connection: it closes those over a bound
// and says whether to go on (no: no connection is open, and the goroutine
// ends). A round that panics is logged and counted, and the next goes on:
// the watch ends with the process otherwise, and one connection's odd
// state must not end every connection's bound. (Connections the round had
// shut down by then are not logged; netpoll sees their end of stream and
// closes them.) cut and held are reused from round to round.
func (u *unreadCloser) round(cut, held []over) (_, _ []over, goOn bool) {
	defer func() {
		if p := recover(); p != nil {
			goOn = true
			if u.panics != nil {
				u.panics.Inc()
			}
			klog.Errorf("combo-service: panic in the watch of connections' unread bytes, going on: %v\n%s", p, debug.Stack())
		}
	}()
	cut, held, overTotal, goOn := u.look(cut, held)
	for i, o := range cut {
		switch {
		case o.n == oddReader:
			klog.Warnf("combo-service: closed a connection from %s whose unread bytes could not be counted "+
				"(its reader panicked; logged above)", o.conn.RemoteAddr())
		case i < overTotal:
			klog.Warnf("combo-service: closed a connection from %s holding %d bytes it sent and the server "+
				"has not read, more than the %d it may (a request and MaxAheadBytes sent ahead): "+
				"it kept sending while a request ran or its answer waited", o.conn.RemoteAddr(), o.n, u.limit)
		default:
			klog.Warnf("combo-service: closed a connection from %s holding %d bytes it sent and the server "+
				"has not read, the most of any while all connections held more than the %d they may together",
				o.conn.RemoteAddr(), o.n, u.total)
		}
		_ = o.conn.Close()
	}
	return cut, held, goOn
}

// look finds, under the lock, the connections over a bound, shuts them
// down and forgets them; round logs and closes them after. The first
// overTotal of cut passed their own bound, the rest the total.
func (u *unreadCloser) look(cut, held []over) (_, _ []over, overTotal int, goOn bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.conns) == 0 {
		u.running = false
		return cut, held, 0, false
	}
	// Closed under the lock, while conn is still here: netpoll closes
	// its fd only after OnInactive, which waits for the lock, so the
	// fd is still conn's. Later, the number could be another
	// connection's, accepted since.
	closeNow := func(o over) {
		shutDown(o.conn)
		cut = append(cut, o)
		delete(u.conns, o.conn) // closed once; OnInactive finds it gone
	}
	sum := 0
	for conn, r := range u.conns {
		n, ok := u.unread(r)
		if !ok {
			closeNow(over{conn, oddReader})
			continue
		}
		if n > u.limit {
			closeNow(over{conn, n})
			continue
		}
		if n > 0 {
			held = append(held, over{conn, n})
			sum += n
		}
	}
	overTotal = len(cut) // the odd ones among them are logged as such
	if sum > u.total {
		slices.SortFunc(held, func(a, b over) int { return cmp.Compare(b.n, a.n) })
		for _, o := range held {
			if sum <= u.total {
				break
			}
			closeNow(o)
			sum -= o.n
		}
	}
	return cut, held, overTotal, true
}

// unread is r's unread length; ok is false, the panic counted and logged,
// when asking panicked. look closes such a connection: its bound cannot be
// kept, and looking at it again each round would end every round before
// the total is summed, leaving every connection's total unbounded.
func (u *unreadCloser) unread(r netpoll.Reader) (n int, ok bool) {
	defer func() {
		if p := recover(); p != nil {
			ok = false
			if u.panics != nil {
				u.panics.Inc()
			}
			klog.Errorf("combo-service: panic reading a connection's unread length, closing it: %v\n%s", p, debug.Stack())
		}
	}()
	return r.Len(), true
}
