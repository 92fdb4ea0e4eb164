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
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/cloudwego/kitex/pkg/klog"
	"github.com/cloudwego/kitex/server"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
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
//     replica's settings), the append-only and eviction watches and the
//     loop reading the Cluster's slot map stop; then closeRedis stops the
//     Sentinel watch and closes the Redis clients, then the embedded Redis
//     (its TTL ticker first).
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

// warnEvicting logs, once at start, each Redis node whose maxmemory-policy
// may evict the service's keys: an evicted window, dedupe set or stream
// loses gifts silently or counts them twice, and a policy set by a
// platform's default is easy to miss. The embedded Redis has no policy.
// Found through Sentinels, the master they name and the replicas they
// list are asked, each by its address. It returns the nodes found evicting
// (on a Cluster, replicas included), node by node, for the eviction watch to go
// on from: it reads the same nodes (policyReader).
func warnEvicting(ctx context.Context, cfg conf.Config, store *repo.Repo, log *zap.Logger) map[string]string {
	if cfg.Embedded() {
		return nil
	}
	if cfg.Redis.Sentinel() {
		if tlsConfig, err := cfg.Redis.TLSConfig(); err == nil { // read and checked by Validate already
			return warnEvictingFoundBySentinel(ctx, cfg.Redis, tlsConfig, log)
		}
	}
	nodes, err := store.Evicting(ctx)
	if err != nil { // of some nodes: the others' policies are still named
		log.Warn("could not read Redis's maxmemory-policy; it must be noeviction"+refusingUser(err), zap.Error(err))
	}
	for addr, policy := range nodes {
		log.Warn(nodeMayEvict, zap.String("node", addr), zap.String("maxmemory_policy", policy))
	}
	return nodes
}

// clusterStateReload is how old a Redis Cluster client's copy of the slot
// map may grow before the client reads it again (CLUSTER SLOTS, from any
// node that answers), on its next command. go-redis reads it anew at once
// only when a node answers MOVED, ASK or READONLY; a master that died
// answers nothing, and CLUSTERDOWN or a refused dial triggers no reading.
// At go-redis's default of 60 s, every call of a dead master's shards went
// on dialling it for up to a minute after the cluster had promoted its
// replica: reports on them failed UNAVAILABLE, and their windows, open at
// the kill, waited; with cluster-node-timeout's 15 s before the promotion
// and window.stale's 60 s, some were dropped stale. The cost is one CLUSTER
// SLOTS every 2 s per client (two per replica: the report path's and the
// worker's), and only while the client runs commands, which the worker's
// blocking reads always do (idle, a replica made about 34 a minute, the
// report path's at each shardNodesEvery reading; under load 62): a reply
// of a few hundred bytes, far below the traffic of the reports themselves.
// The reading runs beside the commands (go-redis's LazyReload), which use
// the old map until it ends: a node that stops answering delays it by
// redis.timeout, not them.
const clusterStateReload = 2 * time.Second

// openRedis starts the embedded Redis if none is configured and returns its
// address, a constructor of clients for it, and a closer of all of them. With
// TLS it registers on reg whether the files read whole, and the expiry of
// the client certificate, if one is set. m counts the lines its loggers
// leave out and the Sentinel watch's panics.
// A client's pool holds redis.pool_size connections (0: go-redis's 10 per
// CPU) per node, or minConns if that is more.
func openRedis(cfg conf.Config, log *zap.Logger, reg prometheus.Registerer, m *metrics.Metrics) (string, func(minConns int) redis.UniversalClient, func(), error) {
	tlsConfig, err := cfg.Redis.TLSConfig() // nil: plain TCP
	if err != nil {
		return "", nil, nil, err
	}
	opts := &redis.UniversalOptions{
		Addrs: cfg.Redis.Addrs, Username: cfg.Redis.Username, Password: cfg.Redis.Password, DB: cfg.Redis.DB, PoolSize: cfg.Redis.PoolSize,
		// Fail fast: a caller must get UNAVAILABLE within about a second,
		// not after retries pile up behind a dead Redis.
		DialTimeout: cfg.Redis.Timeout, ReadTimeout: cfg.Redis.Timeout, WriteTimeout: cfg.Redis.Timeout,
		PoolTimeout: cfg.Redis.Timeout, MaxRetries: -1, ContextTimeoutEnabled: true,
		// One dial per attempt: go-redis's default of 5, 100 ms apart,
		// outlasts redis.timeout, so a caller got "context deadline
		// exceeded" instead of why the dial failed (refused, a certificate
		// not trusted). The next request dials again.
		DialerRetries: 1,
		// No CLIENT SETINFO on connect: README's ACL user is granted the
		// commands the service runs and no other, and on Redis 7.2+ each
		// new connection's SETINFO, whose refusal go-redis ignores, would
		// fill the ACL LOG with denials that bury real ones.
		DisableIdentity: true,
		// No CLIENT MAINT_NOTIFICATIONS on connect either: go-redis sends
		// it by default (auto mode) for its maintenance notifications,
		// which the service does not use; Redis 7 refuses it as an unknown
		// subcommand, and a Redis that has it would refuse README's ACL
		// user, in the ACL LOG.
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
		// Off by default: renewed, each connection is a dial again, through
		// DNS for a name and through a Sentinel for a master name, so an
		// outage of either would fail every report within the lifetime.
		// Jittered, the pool's connections, made together at start, do not
		// all dial anew at once.
		ConnMaxLifetime: cfg.Redis.ConnMaxLifetime, ConnMaxLifetimeJitter: cfg.Redis.ConnMaxLifetime / 10,
		IsClusterMode: len(cfg.Redis.Addrs) > 0,
		TLSConfig:     tlsConfig,
		// With a master name the client asks the Sentinels at Addrs where
		// the master is, and follows their failovers.
		MasterName: cfg.Redis.SentinelMaster, SentinelUsername: cfg.Redis.SentinelUsername, SentinelPassword: cfg.Redis.SentinelPassword,
	}
	if tlsConfig != nil {
		// Each new connection reads the files again: a certificate rotated
		// in place is used without a restart. TLSConfig stays set: go-redis
		// reads from it that the connections are TLS.
		d, err := newRedisTLSDialer(cfg.Redis.TLSConfigFrom, cfg.Redis.TLSFiles(), cfg.Redis.Timeout, log, m.LogSuppressed)
		if err != nil {
			return "", nil, nil, err
		}
		opts.Dialer = d.Dial
		metrics.RegisterTLSFilesRead(reg, d.filesRead)
		if cfg.Redis.TLSCertFile != "" {
			metrics.RegisterClientCertificateExpiry(reg, d.clientCertificateExpiry)
		}
	}
	var watch *sentinelWatch
	if cfg.Redis.Sentinel() {
		opts.Addrs = cfg.Redis.SentinelAddrs
		// Every connection is kept by the address dialed, so that a
		// failover any Sentinel announces closes those to the old master
		// (sentinelWatch), not only one go-redis's own Sentinel announces.
		dial := opts.Dialer
		if dial == nil {
			dial = redis.NewDialer(&redis.Options{DialTimeout: cfg.Redis.Timeout}) // go-redis's own
		}
		conns := newConnsByAddr()
		opts.Dialer = conns.dialer(dial)
		watch = watchSentinels(cfg.Redis, tlsConfig, dial, conns, logging.Sampled(log.Named("sentinel_watch"), m.LogSuppressed), m)
	}
	closeEmbedded := func() {}
	addr := cfg.Redis.Addr
	switch {
	case len(cfg.Redis.Addrs) > 0:
		// Comma separated, as COMBO_REDIS_ADDRS takes them: fmt.Sprint's
		// brackets made an IPv6 list read "[[::1]:7000 [::1]:7001]".
		addr = strings.Join(cfg.Redis.Addrs, ",")
	case cfg.Redis.Sentinel():
		addr = cfg.Redis.SentinelMaster + " via sentinels " + strings.Join(cfg.Redis.SentinelAddrs, ",")
	case addr == "":
		mr := miniredis.NewMiniRedis()
		// --raw: in a terminal redis-cli otherwise quotes each payload and
		// escapes its non-ASCII bytes, which is not the JSON published.
		watch := "redis-cli --raw -p "
		if cfg.Redis.Password != "" {
			// The password is taken with the embedded Redis, so it must
			// guard it: without this every client got in, on whatever
			// redis.embedded_addr listens on, password or not.
			mr.RequireAuth(cfg.Redis.Password)
			watch = "redis-cli --raw --askpass -p "
		}
		a, stopServer, err := startEmbedded(mr, cfg.Redis.EmbeddedAddr, logging.Sampled(log.Named("main"), m.LogSuppressed))
		if err != nil {
			return "", nil, nil, fmt.Errorf("start embedded redis on %s: %w", cfg.Redis.EmbeddedAddr, err)
		}
		addr = a
		stopTTL := countDownTTLs(mr, embeddedTTLTick)
		closeEmbedded = func() { stopTTL(); stopServer() }
		log.Warn(embeddedWarning,
			zap.String("embedded_redis_addr", addr),
			zap.String("watch_pushes", watch+portOf(addr)+" psubscribe 'act:*:contributions'"))
	}
	if len(opts.Addrs) == 0 {
		opts.Addrs = []string{addr}
	}
	var clients []redis.UniversalClient
	newClient := func(minConns int) redis.UniversalClient {
		o := *opts
		// A client of its own copy of the addresses: a cluster client
		// appends the nodes it discovers to the slice it was given (under
		// its own lock), so clients sharing one backing array with room to
		// spare wrote into each other's node lists, a data race the race
		// detector found during a failover.
		o.Addrs = slices.Clip(slices.Clone(opts.Addrs))
		o.PoolSize = max(conf.EffectivePoolSize(o.PoolSize), minConns)
		var c redis.UniversalClient
		if o.IsClusterMode && o.MasterName == "" {
			// As NewUniversalClient would, but with the slot map reloaded
			// every clusterStateReload (UniversalOptions has no field for
			// it), and no empty slot map taken from a node in no cluster
			// (newClusterNode).
			co := o.Cluster()
			co.ClusterStateReloadInterval = clusterStateReload
			co.NewClient = newClusterNode
			c = redis.NewClusterClient(co)
		} else {
			c = redis.NewUniversalClient(&o)
		}
		clients = append(clients, c)
		return c
	}
	closeAll := func() {
		if watch != nil {
			watch.stop()
		}
		for _, c := range clients {
			_ = c.Close()
		}
		closeEmbedded()
	}
	return addr, newClient, closeAll, nil
}

// repoSettings are the repo's settings read from cfg, the same for the
// report path's repo and the worker's.
func repoSettings(cfg conf.Config) repo.Settings {
	s := repo.Settings{
		Window: cfg.Window.Size, Grace: cfg.Window.Grace, Dedupe: cfg.Window.Dedupe, Stale: cfg.Window.Stale,
		Timeout: cfg.Redis.Timeout, Shards: cfg.Redis.Shards, StreamMaxLen: cfg.Redis.StreamMaxLen,
	}
	if cfg.Embedded() {
		s.ExpiresEarly = embeddedTTLTick
	}
	return s
}

// reportPathSettings are s with what the report path's repo reports of
// its shared pipelines: their size and time, and a panic in one (counted
// in combo_loop_panics_total{loop="report_pipeline"}, logged on log). The
// worker's repo runs no such pipeline.
func reportPathSettings(s repo.Settings, m *metrics.Metrics, log *zap.Logger) repo.Settings {
	s.ObservePipeline = func(reports int, took time.Duration) {
		m.PipelineReports.Observe(float64(reports))
		m.PipelineSeconds.Observe(took.Seconds())
	}
	s.OnPanic = func(p any, stack []byte) {
		m.LoopPanics.WithLabelValues(metrics.LoopReportPipeline).Inc()
		log.Error("recovered panic in a report pipeline; its calls fail INTERNAL",
			zap.Any("panic", p), zap.ByteString("stack", stack))
	}
	return s
}

// embeddedTTLTick is how often the embedded Redis counts its TTLs down:
// a key set within a tick is charged the whole tick, so keys expire up to
// a tick early (or late). What relies on expiry keeps more than a tick of
// margin: a dedupe set lives 2 s past its last lookup (repo/report.lua),
// a window 10 s past window.stale, and a flush tells a window's expired
// data from deleted data a tick (and repo.IDsAhead) before its TTL
// (repo.Settings.ExpiresEarly). Each tick walks every key under miniredis's lock
// (about 13 ms for 50,000 keys, 50 ms under -race), so a second keeps
// that to about 1% of the time where 100 ms made it 13-50%.
const embeddedTTLTick = time.Second

// countDownTTLs makes mr's TTLs run with the clock, once per tick, until
// the returned stop is called. miniredis counts TTLs down only when told
// to: without it no dedupe set or window ever expired and memory grew with
// every id reported. Its ClockTTL does it on every command, sorting every
// key each time, which made one report cost time in proportion to the keys
// held: a batch of 1000 new windows took 3 s, past redis.timeout and the
// client's RPC timeout, and with a thousand windows open a batch of 50
// took about 500 ms. Here the walk is paid once a tick, off the commands.
// Shutdown order: stopped by openRedis's closeAll (run's deferred
// closeRedis, the last thing run does), after the clients close and just
// before the embedded Redis itself.
func countDownTTLs(mr *miniredis.Miniredis, tick time.Duration) (stop func()) {
	done := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTicker(tick)
		defer t.Stop()
		last := time.Now()
		for {
			select {
			case <-done:
				return
			case now := <-t.C:
				mr.FastForward(now.Sub(last))
				last = now
			}
		}
	}()
	return func() { close(done); <-exited }
}

// portOf is what follows "-p " in the watch_pushes hint, for the embedded
// Redis listening at addr (its listener's address): the port, then
// " -h host" when redis-cli's default host, 127.0.0.1, does not reach it
// (redis.embedded_addr on 127.0.0.2 or ::1, say: without -h the hint's
// command connected to 127.0.0.1, to another Redis or to nothing). A
// listener on every address (0.0.0.0, ::) is reached on 127.0.0.1.
func portOf(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(host); host == "" || host == "localhost" ||
		ip != nil && (ip.IsUnspecified() || ip.Equal(net.IPv4(127, 0, 0, 1))) {
		return port
	}
	return port + " -h " + host
}

// maxProfile bounds the seconds a pprof profile or trace may be asked
// for: ten times pprof's default of 30 s.
const maxProfile = 5 * time.Minute

// boundedProfile serves h, a pprof profile, trace or delta of a named
// profile, unless its seconds pass maxProfile. pprof takes any length, and
// a caller asking for hours held the tracer (one at a time) and its cost
// on the process that long.
func boundedProfile(h http.HandlerFunc) http.HandlerFunc {
	return func(rw http.ResponseWriter, r *http.Request) {
		if v := r.FormValue("seconds"); v != "" {
			// NaN and ±Inf parse too: refused by the range check.
			if sec, err := strconv.ParseFloat(v, 64); err == nil && !(sec <= maxProfile.Seconds()) {
				http.Error(rw, fmt.Sprintf("seconds: at most %d", int(maxProfile.Seconds())), http.StatusBadRequest)
				return
			}
		}
		h(rw, r)
	}
}

// serveMetrics serves /metrics, /healthz (the process is alive) and
// /readyz (Redis answers and takes writes, and the worker runs; not once
// stopping is closed, when the service has begun to shut down).
// ln is the listener on cfg.Addr, nil when it is empty (metrics off); a
// connection idle for idle is closed (main: rpcserver.MaxConnIdle).
func serveMetrics(ln net.Listener, cfg conf.Metrics, reg *prometheus.Registry, store *repo.Repo, w *worker.Worker, stopping <-chan struct{}, log *zap.Logger, idle time.Duration) (*http.Server, string) {
	if ln == nil {
		return nil, ""
	}
	mux := http.NewServeMux()
	if cfg.Pprof {
		mux.HandleFunc("/debug/pprof/", boundedProfile(pprof.Index)) // named profiles take seconds too (a delta)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", boundedProfile(pprof.Profile))
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", boundedProfile(pprof.Trace))
	}
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("/healthz", func(rw http.ResponseWriter, _ *http.Request) { _, _ = rw.Write([]byte("ok\n")) })
	ready := &readinessLog{log: log}
	mux.HandleFunc("/readyz", func(rw http.ResponseWriter, r *http.Request) {
		// From SIGTERM on: the RPC listener is closed (or closing) while
		// this server still answers, for as long as the held windows take
		// to come due; a load balancer or a caller's discovery that reads
		// ready then sends reports that cannot land here.
		select {
		case <-stopping:
			http.Error(rw, "stopping: shutting down; send reports to another replica", http.StatusServiceUnavailable)
			return
		default:
		}
		ctx, cancel := context.WithTimeout(r.Context(), time.Second)
		defer cancel()
		if err := store.Ready(ctx); err != nil {
			if r.Context().Err() == nil { // not a probe that gave up
				ready.note("redis", err.Error())
			}
			http.Error(rw, "redis: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		if !w.Running() {
			ready.note("worker", "worker not running")
			http.Error(rw, "worker not running", http.StatusServiceUnavailable)
			return
		}
		ready.note("ok", "")
		_, _ = rw.Write([]byte("ok\n"))
	})
	// IdleTimeout as on the RPC port (main passes rpcserver.MaxConnIdle): without it a
	// connection kept alive after a request and never used again (a probe
	// that opens one each time and does not close it) held its file
	// descriptor and goroutine for as long as the process lived, and Redis
	// connections need those descriptors too. A scraper's connection,
	// reused at every scrape, is never idle that long.
	// What net/http logs (an accept failing for want of file descriptors,
	// a handler's panic) is a line of the service's log, at warn: without
	// it, Go's standard logger wrote plain text to stderr among the JSON
	// lines. Not sampled: net/http backs a failing accept off to one a
	// second, and a panic is its request's.
	errorLog, _ := zap.NewStdLogAt(log.Named("metrics_server"), zap.WarnLevel) // fails only for an unknown level
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: idle, ErrorLog: errorLog}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server failed", zap.Error(err))
		}
	}()
	return srv, ln.Addr().String()
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
