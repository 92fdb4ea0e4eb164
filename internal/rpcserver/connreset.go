package rpcserver

import (
	"context"

	"github.com/cloudwego/kitex/pkg/remote"
	"github.com/cloudwego/kitex/pkg/remote/transmeta"
	"github.com/cloudwego/kitex/pkg/rpcinfo"
)

// connResetMark is the one TTHeader meta the server writes, and it reads
// none: while the server stops, Kitex tags every answer for connection
// reset, and this puts the tag in the answer's header, where a TTHeader
// client (client.NewClient) reads it and drops the connection. Kitex's
// ServerTTHeaderHandler does this too, with more per-call work than the
// service needs.
type connResetMark struct{}

func (connResetMark) ReadMeta(ctx context.Context, _ remote.Message) (context.Context, error) {
	return ctx, nil
}

func (connResetMark) WriteMeta(ctx context.Context, msg remote.Message) (context.Context, error) {
	v, ok := msg.RPCInfo().To().Tag(rpcinfo.ConnResetTag)
	if !ok {
		return ctx, nil
	}
	if info := msg.TransInfo(); info.TransStrInfo() != nil {
		info.TransStrInfo()[transmeta.HeaderConnectionReadyToReset] = v
	} else {
		info.PutTransStrInfo(map[string]string{transmeta.HeaderConnectionReadyToReset: v})
	}
	return ctx, nil
}
