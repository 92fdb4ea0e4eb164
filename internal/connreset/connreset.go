// Package connreset carries Kitex's connection-reset mark in TTHeader, and
// nothing else, on the server's side. While a Kitex server stops, it tags
// every answer for connection reset; Server puts that tag in the answer's
// header. The client package's callers read it back with Kitex's own
// client TTHeader handler (which it installs to send the caller's name), so
// that Kitex's pool drops the connection instead of handing it to the next
// call, which then dials a replica that is up.
//
// Kitex's own server TTHeader meta handler carries the mark too, but also
// writes six headers on every answer and parses the request's: about a
// seventh of the RPC layer's throughput (BENCHMARKS.md), for nothing the
// service uses.
package connreset

import (
	"context"

	"github.com/cloudwego/kitex/pkg/remote"
	"github.com/cloudwego/kitex/pkg/remote/transmeta"
	"github.com/cloudwego/kitex/pkg/rpcinfo"
)

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
