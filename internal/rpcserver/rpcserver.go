// Package rpcserver is the Kitex server set-up combo-service runs with: its
// netpoll runner, its identity, its per-RPC metrics, and its defences: only
// framed netpoll transports, each request's bytes checked before Kitex
// decodes them (guard.go), a bound on each connection's unread bytes
// (unread.go), a connection limit and an idle-connection closer (idle.go),
// a write timeout (writetimeout.go); and each TTHeader caller's timeout, read for the handler
// (deadline.go). It lives apart from main so that cmd/combo-floor, the same
// server with handlers that do no work, measures exactly the RPC layer the
// service pays for.
package rpcserver

import (
	"context"
	"time"

	"github.com/cloudwego/gopkg/concurrency/gopool"
	"github.com/cloudwego/kitex/pkg/limiter"
	knetpoll "github.com/cloudwego/kitex/pkg/remote/trans/netpoll"
	"github.com/cloudwego/kitex/pkg/rpcinfo"
	"github.com/cloudwego/kitex/pkg/stats"
	"github.com/cloudwego/kitex/server"
	"github.com/cloudwego/netpoll"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/combo-service/combo-service/client"
	"github.com/combo-service/combo-service/internal/connreset"
	"github.com/combo-service/combo-service/internal/logging"
	"github.com/combo-service/combo-service/metrics"
)

// netpoll runs each request on a goroutine from a pool. Its default pool
// (bytedance/gopkg) ends a worker as soon as its queue is empty, so under
// load most requests start on a fresh goroutine and grow its stack through
// Kitex's call chain again: runtime.copystack was 13% of the service's CPU
// at 15k RPC/s. cloudwego/gopkg's pool, which netpoll offers as the
// alternative (USE_CLOUDWEGO_GOPOOL), keeps idle workers for a minute, and
// cut the service's CPU per RPC by about a tenth (BENCHMARKS.md).
// netpoll reads this setting when it starts its pollers, hence init: a
// program that imports this package gets it before its main runs.
//
// netpoll also logs, with a log.Logger of its own, to stderr unless told
// otherwise here: plain text amid the service's JSON, whatever log.level
// says, and a line per connection after an accept fails for want of file
// descriptors. It is given netpollLog instead, which main sends to the
// service's logger (SetNetpollLogger).
func init() {
	if err := netpoll.Configure(netpoll.Config{Runner: gopool.CtxGo, LoggerOutput: netpollLog}); err != nil {
		panic("netpoll.Configure: " + err.Error())
	}
}

// netpollLog is netpoll's log output: stderr, as netpoll's own, until
// SetNetpollLogger.
var netpollLog = logging.NewNetpollWriter()

// SetNetpollLogger sends netpoll's log lines to l from now on, at warn and
// sampled (logging.NetpollWriter); nil sends them to stderr again.
func SetNetpollLogger(l *zap.Logger) { netpollLog.SetLogger(l) }

// CountNetpollSuppressed counts netpoll's log lines left out by the
// sampling from now on by s (logger "netpoll"), until stop is called.
func CountNetpollSuppressed(s logging.Suppressed) (stop func()) { return netpollLog.CountSuppressed(s) }

// StopOn makes the server stop taking RPCs when ctx ends (Run then drains
// the ones in flight and returns).
func StopOn(ctx context.Context) server.Option {
	return server.WithExitSignal(func() <-chan error {
		ch := make(chan error, 1)
		go func() { <-ctx.Done(); ch <- nil }()
		return ch
	})
}

// MaxConnIdle closes an RPC connection that has sent nothing this long
// (idleCloser). client.NewClient's pool drops its idle connections after
// one minute, so only connections no client reuses are closed.
const MaxConnIdle = 2 * time.Minute

// ReadWriteTimeout bounds how long a request may take to arrive whole
// (server.WithReadWriteTimeout, of which a Kitex server applies only the
// read side): netpoll waits at most this long for each of Kitex's reads
// of a request (five for TTHeader, two for Framed: up to about 25 s for a
// whole request that trickles in), then Kitex closes the connection. It is
// Kitex's default, set here so that it is said: the largest valid
// request, a MergeLatest of about 47 MB, must come at about 10 MB/s or
// more (13 MB/s at MaxRequestBytes), which any link inside a data centre
// does; a peer that stalls holds its connection and its buffered bytes no
// longer than this. It also bounds how long an answer waits for the peer
// to take it once the socket buffers are full (writeTimeout), so a peer
// that stops reading is cut alike.
const ReadWriteTimeout = 5 * time.Second

// unreadInterval is how often each connection's unread bytes are looked
// at (unreadCloser): a peer sending while its answer waits may pass the
// bound by what its link carries in this time.
const unreadInterval = 50 * time.Millisecond

// MaxUnreadTotalBytes bounds the bytes every connection holds unread
// together (unreadCloser): the per-connection bound times
// server.max_connections would be terabytes. 1 GiB holds about twenty of
// the largest requests arriving at once, far more than callers of
// ordinary size ever hold; past it the connections holding the most are
// closed.
const MaxUnreadTotalBytes = 1 << 30

// Options are the server options every combo-service RPC server shares;
// the caller adds its listener and how it stops. RPCs are counted and
// timed (kitex_server_throughput, kitex_server_latency_us) on reg, and
// large requests' admissions counted (combo_large_requests_total). At most
// maxConns connections are held at once (server.max_connections), idle
// ones are closed (MaxConnIdle), and a request is bounded and checked
// before it is decoded (guardedCodec), large ones within a budget of bytes
// in flight (MaxLargeInFlightBytes), and must arrive within
// ReadWriteTimeout; an answer must be taken within it too. A panic in the
// goroutine that watches every connection's unread bytes is recovered,
// logged and counted on panics (nil: not counted), and the watch goes on.
func Options(reg prometheus.Registerer, maxConns int, panics prometheus.Counter) []server.Option {
	return options(reg, maxConns, MaxConnIdle, ReadWriteTimeout, MaxAheadBytes,
		newInFlight(MaxLargeInFlightBytes, ReadWriteTimeout, reg), panics)
}

func options(reg prometheus.Registerer, maxConns int, idle, readWrite time.Duration, maxAhead int, large *inFlight,
	panics prometheus.Counter) []server.Option {
	return []server.Option{
		server.WithReadWriteTimeout(readWrite),
		// Only Kitex's netpoll transports (TTHeader, Framed): its default
		// also takes HTTP/2 (gRPC) and TTHeader streaming connections,
		// which decode with codecs of their own, past guardedCodec. A
		// gRPC request claiming a 2^31-item list killed the process.
		server.WithTransHandlerFactory(knetpoll.NewSvrTransHandlerFactory()),
		server.WithCodec(newGuardedCodec(maxAhead, large)),
		server.WithConnectionLimiter(limiter.NewConnectionLimiter(maxConns)),
		server.WithBoundHandler(newIdleCloser(idle)),
		server.WithBoundHandler(writeTimeout{timeout: readWrite}),
		server.WithBoundHandler(newUnreadCloser(MaxRequestBytes+maxAhead, MaxUnreadTotalBytes, unreadInterval, panics)),
		server.WithServerBasicInfo(&rpcinfo.EndpointBasicInfo{ServiceName: client.ServiceName}),
		server.WithTracer(metrics.NewRPCTracer(reg)),
		// Last: Kitex finishes tracers in reverse, and a tracer that
		// panics ends the round, so the large requests' budget is given
		// back first. A caller adding tracers of its own must keep it so.
		server.WithTracer(large),
		// The tracer reads only the RPC's start and finish: recording
		// Kitex's detailed events (read, write, handle...) as well cost 4%
		// of the service's CPU per RPC.
		server.WithStatsLevel(stats.LevelBase),
		// With TTHeader clients (client.NewClient), answers carry Kitex's
		// connection-reset mark while the server stops, so their pooled
		// connections close instead of staying busy past its exit wait.
		server.WithMetaHandler(connreset.Server{}),
		// Each request carries its caller's timeout into its RPCInfo, and
		// Kitex's own timeout middleware bounds the handler's ctx by it,
		// so a report stops waiting for Redis once its caller has gone.
		server.WithMetaHandler(callerTimeout{}),
		server.WithEnableContextTimeout(true),
	}
}
