package rpcserver

import (
	"context"
	"net"
	"sync"
	"time"

	"github.com/cloudwego/kitex/pkg/remote"
)

// idleCloser closes an RPC connection that has sent nothing for idle.
// Kitex's own idle option only turns on TCP keepalive, which a peer's
// kernel answers: a silent connection stayed open for ever, and with the
// connection limit, enough of them shut every caller out. A timer per
// connection is reset at each read and closes the connection when it
// fires. This never cuts a request in progress: its reads reset the
// timer, and no handler runs near that long (callers time out in about a
// second). A request that does not arrive whole within ReadWriteTimeout
// is cut, but by Kitex's read timeout, not here.
type idleCloser struct {
	idle   time.Duration
	timers *sync.Map // net.Conn -> *time.Timer
}

func newIdleCloser(idle time.Duration) idleCloser {
	return idleCloser{idle: idle, timers: &sync.Map{}}
}

var _ remote.InboundHandler = idleCloser{}

func (c idleCloser) OnActive(ctx context.Context, conn net.Conn) (context.Context, error) {
	c.timers.Store(conn, time.AfterFunc(c.idle, func() { _ = conn.Close() }))
	return ctx, nil
}

func (c idleCloser) OnRead(ctx context.Context, conn net.Conn) (context.Context, error) {
	if t, ok := c.timers.Load(conn); ok {
		t.(*time.Timer).Reset(c.idle)
	}
	return ctx, nil
}

func (c idleCloser) OnInactive(ctx context.Context, conn net.Conn) context.Context {
	if t, ok := c.timers.LoadAndDelete(conn); ok {
		t.(*time.Timer).Stop()
	}
	return ctx
}

func (c idleCloser) OnMessage(ctx context.Context, _, _ remote.Message) (context.Context, error) {
	return ctx, nil
}
