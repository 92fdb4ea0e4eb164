package client

import (
	"context"

	"github.com/cloudwego/kitex/pkg/remote"
	"github.com/cloudwego/kitex/pkg/remote/transmeta"
	"github.com/cloudwego/kitex/pkg/rpcinfo"
)

// connResetMeta is the one TTHeader meta a combo client reads, and it
// writes none. A stopping combo-service marks its answers with Kitex's
// connection-reset flag; the tag set here makes Kitex's pool drop that
// connection instead of handing it to the next call, which then dials a
// replica that is up. Kitex's ClientTTHeaderHandler does this too, but also
// writes six headers on every call, which cost the RPC layer about a
// seventh of its throughput.
type connResetMeta struct{}

func (connResetMeta) WriteMeta(ctx context.Context, _ remote.Message) (context.Context, error) {
	return ctx, nil
}

func (connResetMeta) ReadMeta(ctx context.Context, msg remote.Message) (context.Context, error) {
	if v, ok := msg.TransInfo().TransStrInfo()[transmeta.HeaderConnectionReadyToReset]; ok {
		if to := rpcinfo.AsTaggable(msg.RPCInfo().To()); to != nil {
			_ = to.SetTag(rpcinfo.ConnResetTag, v)
		}
	}
	return ctx, nil
}
