// Package connreset carries Kitex's connection-reset mark in TTHeader, and
// nothing else. While a Kitex server stops, it tags every answer for
// connection reset; Server puts that tag in the answer's header, and Client
// reads it back so that Kitex's pool drops the connection instead of
// handing it to the next call, which then dials a replica that is up.
//
// Kitex's own TTHeader meta handlers carry the mark too, but also write six
// headers on every call and parse them on the server: about a seventh of
// the RPC layer's throughput (BENCHMARKS.md), for nothing the service uses.
package connreset

import (
	"context"

	"github.com/cloudwego/kitex/pkg/remote"
	"github.com/cloudwego/kitex/pkg/remote/transmeta"
	"github.com/cloudwego/kitex/pkg/rpcinfo"
)

// Client is the client's meta handler: it writes nothing and reads the mark.
type Client struct{}

func (Client) WriteMeta(ctx context.Context, _ remote.Message) (context.Context, error) {
	return ctx, nil
}

func (Client) ReadMeta(ctx context.Context, msg remote.Message) (context.Context, error) {
	if v, ok := msg.TransInfo().TransStrInfo()[transmeta.HeaderConnectionReadyToReset]; ok {
		if to := rpcinfo.AsTaggable(msg.RPCInfo().To()); to != nil {
			_ = to.SetTag(rpcinfo.ConnResetTag, v)
		}
	}
	return ctx, nil
}

// Server is the server's meta handler: it reads nothing and writes the mark
// when Kitex has set it.
type Server struct{}

func (Server) ReadMeta(ctx context.Context, _ remote.Message) (context.Context, error) {
	return ctx, nil
}

func (Server) WriteMeta(ctx context.Context, msg remote.Message) (context.Context, error) {
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
