package main

import (
	"github.com/cloudwego/gopkg/concurrency/gopool"
	"github.com/cloudwego/netpoll"
)

// netpoll runs each request on a goroutine from a pool. Its default pool
// (bytedance/gopkg) ends a worker as soon as its queue is empty, so under
// load most requests start on a fresh goroutine and grow its stack through
// Kitex's call chain again: runtime.copystack was 13% of the service's CPU
// at 15k RPC/s. cloudwego/gopkg's pool, which netpoll offers as the
// alternative (USE_CLOUDWEGO_GOPOOL), keeps idle workers for a minute, and
// cut the service's CPU per RPC by about a tenth (BENCHMARKS.md).
// netpoll reads this setting when it starts its pollers, hence init.
func init() {
	if err := netpoll.Configure(netpoll.Config{Runner: gopool.CtxGo}); err != nil {
		panic("netpoll.Configure: " + err.Error())
	}
}
