package connreset

import (
	"context"
	"testing"

	"github.com/cloudwego/kitex/pkg/remote"
	"github.com/cloudwego/kitex/pkg/remote/transmeta"
	"github.com/cloudwego/kitex/pkg/rpcinfo"
	kitexmeta "github.com/cloudwego/kitex/pkg/transmeta"
	"github.com/cloudwego/kitex/transport"
)

// answer is a reply as a meta handler sees it, its To endpoint holding tags.
func answer(role remote.RPCRole, tags map[string]string) remote.Message {
	to := rpcinfo.NewEndpointInfo("combo", "ReportContribution", nil, tags)
	cfg := rpcinfo.NewRPCConfig()
	// TTHeader framing, as client.NewClient and the server use: Kitex's
	// client handler reads no header of another protocol.
	if err := rpcinfo.AsMutableRPCConfig(cfg).SetTransportProtocol(transport.TTHeaderFramed); err != nil {
		panic(err)
	}
	ri := rpcinfo.NewRPCInfo(rpcinfo.EmptyEndpointInfo(), to,
		rpcinfo.NewInvocation("combo", "ReportContribution"), cfg, rpcinfo.NewRPCStats())
	return remote.NewMessage(nil, ri, remote.Reply, role)
}

// A stopping server's answers carry the mark, and the client's pool reads
// it as the connection's end (through Kitex's client TTHeader handler,
// which the client package installs); every other answer carries none,
// and its connection goes back to the pool. (The shutdown integration test sees
// the first half only when the stop meets a call on a pooled connection,
// and neither half's absence: marking every answer drops every connection
// after one call, which no functional test notices.)
func TestMarkCarriedOnlyWhenKitexSetsIt(t *testing.T) {
	ctx := context.Background()

	stopping := answer(remote.Server, map[string]string{rpcinfo.ConnResetTag: "1"})
	if _, err := (Server{}).WriteMeta(ctx, stopping); err != nil {
		t.Fatal(err)
	}
	if v, ok := stopping.TransInfo().TransStrInfo()[transmeta.HeaderConnectionReadyToReset]; !ok || v != "1" {
		t.Fatalf("a stopping server's answer: header %q=%q (present %v), want \"1\"", transmeta.HeaderConnectionReadyToReset, v, ok)
	}
	running := answer(remote.Server, nil)
	if _, err := (Server{}).WriteMeta(ctx, running); err != nil {
		t.Fatal(err)
	}
	if v, ok := running.TransInfo().TransStrInfo()[transmeta.HeaderConnectionReadyToReset]; ok {
		t.Fatalf("a running server's answer carries the reset mark (%q): every connection would be dropped after one call", v)
	}

	// What the stopping server wrote, as the client reads it.
	marked := answer(remote.Client, nil)
	marked.TransInfo().PutTransStrInfo(stopping.TransInfo().TransStrInfo())
	if _, err := kitexmeta.ClientTTHeaderHandler.ReadMeta(ctx, marked); err != nil {
		t.Fatal(err)
	}
	if _, ok := marked.RPCInfo().To().Tag(rpcinfo.ConnResetTag); !ok {
		t.Fatal("a marked answer left the client's connection to the pool: the next call would go to the stopping server")
	}
	plain := answer(remote.Client, nil)
	plain.TransInfo().PutTransStrInfo(running.TransInfo().TransStrInfo())
	if _, err := kitexmeta.ClientTTHeaderHandler.ReadMeta(ctx, plain); err != nil {
		t.Fatal(err)
	}
	if _, ok := plain.RPCInfo().To().Tag(rpcinfo.ConnResetTag); ok {
		t.Fatal("an unmarked answer tagged for connection reset: every connection would be dropped after one call")
	}
}
