package main

import (
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"go.uber.org/zap"

	"github.com/combo-service/combo-service/conf"
	"github.com/combo-service/combo-service/internal/logging"
	"github.com/combo-service/combo-service/metrics"
	"github.com/combo-service/combo-service/repo"
)

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
