package rpcserver

import (
	"context"
	"net"
	"time"

	"github.com/cloudwego/kitex/pkg/remote"
)

// writeTimeout bounds how long an answer may wait for its caller to take
// it: netpoll waits at most timeout for room in the socket, then the write
// fails and Kitex closes the connection. A Kitex server applies
// server.WithReadWriteTimeout to reads only, and netpoll's default write
// timeout is none. Without it, a caller that sent requests and never read
// the answers held the connection open (its slot of max_connections, the
// handler and the buffered answers) until the idle closer's MaxConnIdle:
// its writes stalled too, so nothing reset the idle timer, but nothing
// closed it either.
type writeTimeout struct {
	passInbound
	timeout time.Duration
}

var _ remote.InboundHandler = writeTimeout{}

// netpoll's connections (the only transport the service serves) can bound
// their writes; another net.Conn is left as it is.
type writeBounded interface {
	SetWriteTimeout(time.Duration) error
}

func (w writeTimeout) OnActive(ctx context.Context, conn net.Conn) (context.Context, error) {
	if c, ok := conn.(writeBounded); ok {
		_ = c.SetWriteTimeout(w.timeout) // fails only on a closed connection, which writes nothing
	}
	return ctx, nil
}

// passInbound is an inbound handler that does nothing; a handler embeds
// it and writes only the events it acts on.
type passInbound struct{}

func (passInbound) OnActive(ctx context.Context, _ net.Conn) (context.Context, error) {
	return ctx, nil
}

func (passInbound) OnRead(ctx context.Context, _ net.Conn) (context.Context, error) { return ctx, nil }

func (passInbound) OnInactive(ctx context.Context, _ net.Conn) context.Context { return ctx }

func (passInbound) OnMessage(ctx context.Context, _, _ remote.Message) (context.Context, error) {
	return ctx, nil
}
