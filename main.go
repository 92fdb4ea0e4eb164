// Command combo-service merges repeated gifts of one user into one feed item
// per window and publishes it once on act:{activity_id}:contributions.
// See README.md; the wire contract is CONTRACT.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"

	"github.com/cloudwego/kitex/pkg/klog"
	"github.com/cloudwego/kitex/server"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/combo-service/combo-service/conf"
	"github.com/combo-service/combo-service/handler"
	"github.com/combo-service/combo-service/internal/logging"
	"github.com/combo-service/combo-service/internal/rpcserver"
	"github.com/combo-service/combo-service/kitex_gen/combo/comboservice"
	"github.com/combo-service/combo-service/metrics"
	"github.com/combo-service/combo-service/repo"
	"github.com/combo-service/combo-service/worker"
)

func main() {
	confPath := flag.String("conf", os.Getenv("COMBO_CONFIG"), "optional YAML config file (also COMBO_CONFIG)")
	probe := flag.String("healthcheck", "", "probe this path (/healthz or /readyz) on the configured metrics.addr, exit 0 if it answers 2xx; for container HEALTHCHECKs")
	check := flag.Bool("check-config", false, "load the configuration (-conf, environment), print its errors or warnings, exit 0 if a start would take it, 2 if not; starts nothing")
	flag.Parse()
	if flag.NArg() > 0 {
		// combo-service /etc/combo.yaml would otherwise start on its
		// embedded Redis, the file unread.
		fmt.Fprintf(os.Stderr, "combo-service: unexpected argument %q: give a config file with -conf <path> or COMBO_CONFIG\n", flag.Arg(0))
		os.Exit(2)
	}

	if *probe != "" {
		// metrics.addr is all it needs, read so that no edit of the file
		// since the service started fails the probe of a live service.
		addr, err := conf.MetricsAddr(*confPath)
		if err == nil {
			err = healthcheck(addr, *probe, 2*time.Second)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "healthcheck:", err)
			os.Exit(1) // a HEALTHCHECK knows 0 and 1; Docker reserves 2
		}
		os.Exit(0)
	}
	if *check {
		os.Exit(checkConfig(*confPath, os.Environ(), os.Stdout, os.Stderr))
	}
	cfg, err := conf.Load(*confPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	log, err := logging.New(cfg.Log.Level, cfg.Log.Format)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	defer log.Sync() //nolint:errcheck // nothing to do if stderr is gone
	klog.SetLogger(logging.Klog(log))
	rpcserver.SetNetpollLogger(log)
	redis.SetLogger(logging.Redis(log))
	for _, name := range conf.UnknownEnv(os.Environ()) {
		log.Warn("environment variable is no configuration key: ignored (misspelled?)", zap.String("name", name))
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	// After the first signal, the next one gets its default action and ends
	// the process at once, cutting the drain short: the windows this
	// replica still holds stay pending in Redis, for another replica to
	// claim or for this one's next start (on the embedded Redis, they end
	// with the process).
	go func() {
		<-ctx.Done()
		stop()
		log.Info("signal received: stopping (a second signal ends the process at once)")
	}()
	if err := run(ctx, cfg, log, nil); err != nil {
		logRunError(log, err)
		os.Exit(1)
	}
}

// startError is an error of run before it served (a port taken, the
// embedded Redis not started): the service failed to start, it did not
// stop.
type startError struct{ error }

func (e startError) Unwrap() error { return e.error }

// logRunError logs run's error: a failure to start, or an error of the
// stop (a drain cut short). Without a stacktrace: zap's production
// configuration adds one at error level, and main's says nothing the
// message does not.
func logRunError(log *zap.Logger, err error) {
	msg := "combo-service stopped with an error"
	if errors.As(err, new(startError)) {
		msg = "combo-service failed to start"
	}
	log.WithOptions(zap.AddStacktrace(zap.FatalLevel)).Error(msg, zap.Error(err))
}

// started tells a caller of run (the tests) where things listen.
type started struct {
	RPCAddr     string
	RedisAddr   string
	MetricsAddr string
}

// run wires the service, serves until ctx ends, then shuts down in order:
//  0. /readyz fails at once; with server.shutdown_delay, RPCs are still
//     taken that long (afterDelay), while the orchestrator removes the
//     replica from its endpoints;
//  1. stop taking RPCs: the Kitex server stops taking connections, marks
//     its answers so TTHeader clients drop theirs, and closes open ones as
//     they fall idle (up to 2 s); then reports on any still open are
//     refused and those in flight finish (h.Drain);
//  2. the worker stops reading, then publishes every window it holds as it
//     comes due (bounded by server.shutdown_timeout);
//  3. the metrics server, the settings watch (which deletes this
//     replica's settings unless a twin holds its claim), the append-only
//     and eviction watches and the loop reading the Cluster's slot map
//     stop; then closeRedis stops the Sentinel watch and closes the Redis
//     clients, then the embedded Redis (its TTL ticker first).
func run(ctx context.Context, cfg conf.Config, log *zap.Logger, ready chan<- started) error {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		collectors.NewBuildInfoCollector())
	m := metrics.New(reg)
	defer countLibrarySuppressed(m.LogSuppressed)()
	m.StreamMaxLength.Set(float64(cfg.Redis.StreamMaxLen))
	version, revision := buildVersion()
	m.BuildInfo.WithLabelValues(version, revision).Set(1)

	redisAddr, newClient, closeRedis, err := openRedis(cfg, log, reg, m)
	if err != nil {
		return startError{err}
	}
	defer closeRedis()

	settings := repoSettings(cfg)
	reportSettings := reportPathSettings(settings, m, logging.Sampled(log.Named("repo"), m.LogSuppressed))
	// On a Redis Cluster the pool is per node: the batches that may run
	// pipelines of their own at once are bounded per node, by its own
	// shards, read from the slot map (as if one node served them all if
	// it cannot be yet), and read again every shardNodesEvery.
	startCtx, cancelStart := context.WithTimeout(ctx, 2*time.Second)
	reportClient := newClient(0)
	if reportSettings.ShardNodes, err = repo.ShardNodes(startCtx, reportClient, repo.NewKeys(cfg.Redis.Shards)); err != nil {
		log.Warn("could not read which node serves each shard; bounding batch pipelines as if one node served them all until it can be read",
			zap.Int("shards", cfg.Redis.Shards), zap.Error(err))
	}
	cancelStart()
	store := repo.New(reportClient, reportSettings)
	if _, cluster := reportClient.(*redis.ClusterClient); cluster {
		nodes := newShardNodeWatch(store.RefreshShardNodes, shardNodesEvery, cfg.Redis.Timeout, logging.Sampled(log.Named("shard_nodes"), m.LogSuppressed), m)
		nodes.Start()
		defer nodes.Stop() // before closeRedis, deferred earlier
	}
	// The worker has its own connections: under a flood of reports its
	// flushes must not queue behind the request path's pipelines for a
	// pooled connection, or windows close late. Its pool fits its shards:
	// each shard's reader holds a connection in a blocking read.
	workerStore := repo.New(newClient(worker.Conns(cfg.Redis.Shards, len(cfg.Redis.Addrs) > 0)), settings)
	// Scripts are loaded now so pipelines can use EVALSHA at once; a node
	// that lacks them later (down now, restarted, failed over) gets them
	// by EVAL on its first NOSCRIPT.
	loadCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
	if err := store.LoadScripts(loadCtx); err != nil {
		log.Warn("could not load Lua scripts yet; will send them on first use", zap.Error(err))
	}
	evicting := warnEvicting(loadCtx, cfg, store, log)
	// In time of its own: through Sentinels it asks them again, and with a
	// hung one listed first the budget the checks above share ran out
	// before a master without AOF was read.
	aofCtx, cancelAOF := context.WithTimeout(ctx, 2*time.Second)
	notAppendOnly := warnNotAppendOnly(aofCtx, cfg, store, log)
	cancelAOF()
	if cfg.Redis.Sentinel() {
		if tlsConfig, err := cfg.Redis.TLSConfig(); err == nil { // read and checked by Validate already
			checkSentinels(ctx, cfg.Redis, tlsConfig, log) // each within its own time
		}
	}
	cancel()
	if !cfg.Embedded() {
		stopNodeWatches := startNodeWatches(cfg.Redis, store, nodeWatchEvery, evicting, notAppendOnly, log, m)
		defer stopNodeWatches() // before closeRedis, deferred earlier
		sw := newReplicaSettingsWatch(cfg, store, log, m)
		sw.Start()
		defer sw.Stop() // before closeRedis, deferred earlier
	}

	// The ports are taken before the worker starts: one in use stops the
	// start at once. A worker already started would have to drain first,
	// waiting out server.shutdown_timeout while Redis is down.
	ln, err := net.Listen("tcp", cfg.Server.Addr)
	if err != nil {
		return startError{fmt.Errorf("listen %s: %w", cfg.Server.Addr, err)}
	}
	var metricsLn net.Listener
	if cfg.Metrics.Addr != "" {
		if metricsLn, err = net.Listen("tcp", cfg.Metrics.Addr); err != nil {
			ln.Close()
			return startError{fmt.Errorf("listen metrics %s: %w", cfg.Metrics.Addr, err)}
		}
	}

	// A signal during start-up (seconds, while Redis is slow or down):
	// nothing has been accepted, so the service stops here. Handed a ctx
	// already ended, Kitex would shut down before its listener was set up,
	// then serve on the port until the process exited.
	if ctx.Err() != nil {
		ln.Close()
		if metricsLn != nil {
			metricsLn.Close()
		}
		log.Info("stopped during start-up, before serving")
		return nil
	}
	rpcLn, err := rpcserver.Listener(ln)
	if err != nil {
		ln.Close()
		if metricsLn != nil {
			metricsLn.Close()
		}
		return startError{fmt.Errorf("listen %s: %w", cfg.Server.Addr, err)}
	}

	w := worker.New(workerStore, workerConfig(cfg), logging.Sampled(log.Named("worker"), m.LogSuppressed), m)
	w.Start()

	rpcCtx, cancelRPC := afterDelay(ctx, cfg.Server.ShutdownDelay, log)
	defer cancelRPC()
	h := handler.New(store, cfg.Window.Size, m, logging.Sampled(log.Named("handler"), m.LogSuppressed))
	svr := comboservice.NewServer(h,
		append(rpcserver.Options(reg, cfg.Server.MaxConnections, m.LoopPanics.WithLabelValues(metrics.LoopUnreadWatch)),
			server.WithListener(rpcLn),
			rpcserver.StopOn(rpcCtx),
			server.WithExitWaitTime(2*time.Second),
		)...,
	)

	metricsSrv, metricsAddr := serveMetrics(metricsLn, cfg.Metrics, reg, store, w, ctx.Done(), log, rpcserver.MaxConnIdle)

	log.Info("combo-service started",
		zap.String("version", version), zap.String("revision", revision),
		zap.String("rpc_addr", ln.Addr().String()), zap.String("redis", redisAddr), zap.Bool("redis_tls", cfg.Redis.TLS),
		zap.String("metrics_addr", metricsAddr), zap.String("consumer", cfg.Worker.Consumer),
		zap.Duration("window_size", cfg.Window.Size), zap.Duration("window_grace", cfg.Window.Grace), zap.Int("shards", cfg.Redis.Shards))
	for _, w := range cfg.Warnings() {
		log.Warn(w)
	}
	// The nodes serving the shards as the slot map read above has them (on
	// one Redis, or with the slot map unread, one).
	nodes := 1
	if len(reportSettings.ShardNodes) > 0 {
		nodes = slices.Max(reportSettings.ShardNodes) + 1
	}
	warnOpenFileLimit(cfg, nodes, log)
	if ready != nil {
		ready <- started{RPCAddr: ln.Addr().String(), RedisAddr: redisAddr, MetricsAddr: metricsAddr}
	}

	// Run blocks until rpcCtx ends (server.shutdown_delay after ctx), then
	// stops taking connections and waits (server.WithExitWaitTime) for
	// open ones to fall idle, closing them.
	// client.NewClient drops a connection on the answer that carries
	// Kitex's reset mark; a client without TTHeader can keep one busy, never
	// idle at Kitex's checks: Run then
	// returns context.DeadlineExceeded and Kitex goes on serving it. Its
	// reports are refused from here on (h.Drain), so that every report
	// acknowledged precedes the worker's last read of the stream.
	runErr := svr.Run()
	if errors.Is(runErr, context.DeadlineExceeded) {
		log.Warn("connections still busy after the RPC server's exit wait; refusing their reports as UNAVAILABLE")
		runErr = nil
	}
	drainCtx, cancelDrain := context.WithTimeout(context.Background(), cfg.Server.ShutdownTimeout)
	defer cancelDrain()
	if err := h.Drain(drainCtx); err != nil {
		runErr = errors.Join(runErr, fmt.Errorf("drain reports in flight: %w", err))
	}
	log.Info("rpc server stopped; publishing held windows") // how many: the worker says after its final read
	shutdownErr := w.Shutdown(drainCtx)
	if shutdownErr != nil && cfg.Embedded() {
		// The worker's error says what stays pending is another replica's
		// to take; the embedded Redis ends with this process.
		shutdownErr = fmt.Errorf("%w (the embedded Redis ends with this process: no other replica takes what it held)", shutdownErr)
	}
	if metricsSrv != nil {
		// Scrapes are short; a pprof profile may run for minutes, and the
		// exit is not held up for it (it held it the whole
		// server.shutdown_timeout, with nothing said).
		scrapeCtx, cancelScrape := context.WithTimeout(drainCtx, time.Second)
		if err := metricsSrv.Shutdown(scrapeCtx); err != nil {
			_ = metricsSrv.Close()
			log.Info("metrics server closed with requests still running (a pprof profile, or a scrape at the drain's bound)", zap.Error(err))
		}
		cancelScrape()
	}
	if err := errors.Join(runErr, shutdownErr); err != nil {
		return err
	}
	log.Info("combo-service stopped cleanly")
	return nil
}

// workerConfig is the worker's part of cfg; the worker's own defaults
// fill the rest (MaxHeld, OpTimeout, SampleEvery).
func workerConfig(cfg conf.Config) worker.Config {
	return worker.Config{
		Consumer: cfg.Worker.Consumer, Shards: cfg.Redis.Shards, ClaimIdle: cfg.Worker.ClaimIdle, Stale: cfg.Window.Stale,
		ReadCount: cfg.Worker.ReadCount, BatchSize: cfg.Worker.BatchSize, Block: cfg.Worker.Block,
		ConsumerIdleDelete: cfg.Worker.ConsumerIdleDelete,
		// On a Redis Cluster (redis.addrs) shards live on masters whose
		// clocks may differ.
		NodePerShard: len(cfg.Redis.Addrs) > 0,
	}
}
