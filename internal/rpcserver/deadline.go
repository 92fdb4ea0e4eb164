package rpcserver

import (
	"context"
	"strconv"
	"time"

	"github.com/cloudwego/kitex/pkg/remote"
	"github.com/cloudwego/kitex/pkg/remote/transmeta"
	"github.com/cloudwego/kitex/pkg/rpcinfo"
)

// callerTimeout reads the RPC timeout a TTHeader caller sends with each
// request (client.NewClient's, or the Reporter's RPCTimeout) into the
// request's RPCInfo, where Kitex's timeout middleware
// (server.WithEnableContextTimeout) bounds the handler's ctx by it.
// Kitex never ends a handler's ctx: a caller that had given up still had
// its reports wait for, and ride, a pipeline to Redis, under overload
// work for answers nobody reads, whose retries then come as duplicates.
// Only this one header is read: Kitex's own TTHeader handler parses them
// all, at a cost the service does not pay (see connreset).
type callerTimeout struct{}

var _ remote.MetaHandler = callerTimeout{}

func (callerTimeout) ReadMeta(ctx context.Context, msg remote.Message) (context.Context, error) {
	v, ok := msg.TransInfo().TransIntInfo()[transmeta.RPCTimeout]
	if !ok {
		return ctx, nil
	}
	ms, err := strconv.Atoi(v)
	if err != nil || ms <= 0 {
		return ctx, nil
	}
	if cfg := rpcinfo.AsMutableRPCConfig(msg.RPCInfo().Config()); cfg != nil {
		_ = cfg.SetRPCTimeout(time.Duration(ms) * time.Millisecond)
	}
	return ctx, nil
}

func (callerTimeout) WriteMeta(ctx context.Context, _ remote.Message) (context.Context, error) {
	return ctx, nil
}
