// Package conf is the service's configuration: one struct with defaults,
// read once in main (viper: optional YAML file, then COMBO_<SECTION>_<KEY>
// environment variables, environment winning) and passed down by value.
package conf

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// Config is every knob of the service. CONTRACT.md §4 names the required
// keys; the rest have defaults that suit one replica on a laptop and a
// fleet alike.
type Config struct {
	Server  Server  `mapstructure:"server"`
	Metrics Metrics `mapstructure:"metrics"`
	Redis   Redis   `mapstructure:"redis"`
	Window  Window  `mapstructure:"window"`
	Worker  Worker  `mapstructure:"worker"`
	Log     Log     `mapstructure:"log"`
}

type Server struct {
	// Addr is where the Kitex RPC server listens.
	Addr string `mapstructure:"addr"`
	// ShutdownTimeout bounds the drain on SIGTERM; windows still held after
	// it stay pending in Redis and are reclaimed by another replica.
	ShutdownTimeout time.Duration `mapstructure:"shutdown_timeout"`
	// ShutdownDelay is how long, from SIGTERM, the service goes on taking
	// RPCs with /readyz already failing, before it stops taking them. An
	// orchestrator removes a stopping replica from its endpoints a second
	// or more after it signals it (Kubernetes: kube-proxy, DNS, callers'
	// own discovery); a port closed at the signal refuses the callers still
	// routed to it meanwhile. The image has no sleep for a preStop hook.
	ShutdownDelay time.Duration `mapstructure:"shutdown_delay"`
	// MaxConnections bounds the RPC connections held at once: more are
	// closed as they are accepted, so idle ones cannot use up the file
	// descriptors that Redis and the metrics listener need too.
	MaxConnections int `mapstructure:"max_connections"`
}

type Metrics struct {
	// Addr serves /metrics, /healthz and /readyz; empty turns it off.
	Addr string `mapstructure:"addr"`
	// Pprof also serves Go's /debug/pprof/ there, for profiling a replica
	// under load. Off by default: it is not for the open network.
	Pprof bool `mapstructure:"pprof"`
}

type Redis struct {
	// Addr of a single Redis; empty (and no Addrs, no SentinelAddrs)
	// starts an embedded one.
	Addr string `mapstructure:"addr"`
	// Addrs of Redis Cluster seed nodes; non-empty turns on cluster mode.
	Addrs []string `mapstructure:"addrs"`
	// SentinelAddrs of the Redis Sentinels that watch SentinelMaster, the
	// name of one Redis and its replicas: the service asks them which node
	// is the master, and follows it when they fail it over.
	SentinelAddrs  []string `mapstructure:"sentinel_addrs"`
	SentinelMaster string   `mapstructure:"sentinel_master"`
	// SentinelUsername and SentinelPassword log in to the Sentinels (they
	// have users of their own); Username and Password, to the Redis.
	SentinelUsername string `mapstructure:"sentinel_username"`
	SentinelPassword string `mapstructure:"sentinel_password"`
	// EmbeddedAddr is where the embedded Redis listens (port 0 = free port).
	EmbeddedAddr string `mapstructure:"embedded_addr"`
	// Username is the Redis 6+ ACL user; empty is the default user, the
	// only one a password alone can log in as.
	Username string `mapstructure:"username"`
	Password string `mapstructure:"password"`
	DB       int    `mapstructure:"db"`
	// Timeout bounds one request path's Redis work, so callers get
	// UNAVAILABLE quickly instead of waiting out retries.
	Timeout time.Duration `mapstructure:"timeout"`
	// Shards is the number of hash-tagged streams keys are spread over; on a
	// cluster it spreads one hot activity over several masters.
	Shards int `mapstructure:"shards"`
	// StreamMaxLen is a far-away safety bound: a stream this long takes no
	// new window, and a report that would open one is published on its own
	// (degraded). Flushed entries are deleted, so a stream normally holds
	// only open windows.
	StreamMaxLen int64 `mapstructure:"stream_maxlen"`
	PoolSize     int   `mapstructure:"pool_size"`
	// ConnMaxLifetime, when set, closes every Redis connection that old when
	// it is next taken, and dials anew: a name moved by a failover is then
	// followed away from a demoted master that answers MASTERDOWN, which
	// go-redis does not take for a dead connection (README).
	ConnMaxLifetime time.Duration `mapstructure:"conn_max_lifetime"`
	// TLS dials Redis over TLS, as managed Redis services with in-transit
	// encryption require. The certificate is verified against TLSCAFile
	// (empty: the system's roots) for the host of each address, or for
	// TLSServerName when set (cluster nodes are announced by IP).
	TLS           bool   `mapstructure:"tls"`
	TLSCAFile     string `mapstructure:"tls_ca_file"`
	TLSServerName string `mapstructure:"tls_server_name"`
	// TLSCertFile and TLSKeyFile are this service's certificate, for a
	// Redis that asks for one (tls-auth-clients yes): both or neither.
	TLSCertFile string `mapstructure:"tls_cert_file"`
	TLSKeyFile  string `mapstructure:"tls_key_file"`
}

type Window struct {
	// Size is W: how long after its first report a window stays open.
	Size time.Duration `mapstructure:"size"`
	// Grace is waited after W before a window is flushed, so reports still
	// in flight whose created_at falls inside the window can join it.
	Grace time.Duration `mapstructure:"grace"`
	// Dedupe is how long a contribution id is remembered.
	Dedupe time.Duration `mapstructure:"dedupe"`
	// Stale is how long after opening a window may still be published;
	// older ones are dropped and counted.
	Stale time.Duration `mapstructure:"stale"`
}

type Worker struct {
	// Consumer is this replica's name in the consumer group. It must be
	// stable across restarts so a restarted replica finds its own pending
	// entries again.
	Consumer string `mapstructure:"consumer"`
	// ClaimIdle: entries pending on another consumer longer than this are
	// taken over. Must exceed Window.Size + Window.Grace and stay below
	// Window.Stale.
	ClaimIdle time.Duration `mapstructure:"claim_idle"`
	// ConsumerIdleDelete: a consumer with no pending entries, idle this long,
	// is removed from the group once its replica's settings key has expired
	// (a live replica's consumer is kept however idle: repo.PruneConsumers).
	ConsumerIdleDelete time.Duration `mapstructure:"consumer_idle_delete"`
	// ReadCount is XREADGROUP COUNT; BatchSize is how many due windows one
	// pipelined flush carries.
	ReadCount int `mapstructure:"read_count"`
	BatchSize int `mapstructure:"batch_size"`
	// Block is XREADGROUP BLOCK. It must be finite (go-redis reads 0 as
	// "forever"), so shutdown is prompt.
	Block time.Duration `mapstructure:"block"`
}

type Log struct {
	Level string `mapstructure:"level"`
	// Format is "json" (production) or "console" (development).
	Format string `mapstructure:"format"`
}

// MaxShutdownDelay bounds server.shutdown_delay: endpoints are removed
// within seconds, and a longer delay only holds up every rollout.
const MaxShutdownDelay = time.Minute

// Default returns the configuration used when nothing is set.
func Default() Config {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "combo-worker"
	}
	c := Config{
		Server:  Server{Addr: ":8888", ShutdownTimeout: 15 * time.Second, MaxConnections: 10_000},
		Metrics: Metrics{Addr: ":9100"},
		Redis: Redis{
			EmbeddedAddr: "127.0.0.1:0",
			Timeout:      500 * time.Millisecond,
			Shards:       1,
			StreamMaxLen: 10_000_000,
		},
		Window: Window{Size: 3 * time.Second, Grace: 200 * time.Millisecond, Dedupe: 60 * time.Second, Stale: 60 * time.Second},
		Worker: Worker{
			Consumer:           host,
			ConsumerIdleDelete: 24 * time.Hour,
			ReadCount:          512,
			BatchSize:          256,
			Block:              time.Second,
		},
		Log: Log{Level: "info", Format: "json"},
	}
	c.Worker.ClaimIdle = DefaultClaimIdle(c.Window)
	return c
}

// DefaultClaimIdle is W + grace + 2 s: long enough that a live owner has
// flushed its entry, short enough that a dead owner's windows are late by
// seconds, not minutes. When window.stale leaves less room than that (a W
// near it), it is halfway between W + grace and window.stale, so that a
// valid window alone never makes the default invalid.
func DefaultClaimIdle(w Window) time.Duration {
	open := w.Size + w.Grace
	d := open + 2*time.Second
	if w.Stale > open && d >= w.Stale {
		// Whole ms: XAUTOCLAIM's min-idle is in ms. window.stale exceeds
		// W + grace by at least 2 ms (Validate), so this still does.
		d = open + ((w.Stale - open) / 2).Truncate(time.Millisecond)
	}
	return d
}

// defaultConsumerIdleDelete is a day, or worker.claim_idle when that is
// longer (a W of a day): a consumer is removed only once its entries
// could have been claimed.
func defaultConsumerIdleDelete(claimIdle time.Duration) time.Duration {
	return max(24*time.Hour, claimIdle)
}

// Embedded reports whether the service runs on its embedded Redis.
func (c Config) Embedded() bool {
	return c.Redis.Addr == "" && len(c.Redis.Addrs) == 0 && len(c.Redis.SentinelAddrs) == 0
}

// Validate refuses settings the service cannot honour, naming the key.
func (c Config) Validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", key, fmt.Sprintf(format, args...)))
	}
	if !isListenAddr(c.Server.Addr) {
		bad("server.addr", "must be host:port (host may be empty, port 0..65535 or a service name), got %q", c.Server.Addr)
	}
	if c.Metrics.Addr != "" && !isListenAddr(c.Metrics.Addr) {
		bad("metrics.addr", "must be host:port (host may be empty, port 0..65535 or a service name) or empty, got %q", c.Metrics.Addr)
	}
	// Two listeners on one port: the second failed at start with "address
	// already in use", naming the address but not the settings, and with
	// the embedded Redis on server.addr the port was the service's own.
	if c.Metrics.Addr != "" && sameListenPort(c.Server.Addr, c.Metrics.Addr) {
		bad("metrics.addr", "must not listen on server.addr's port (%q), got %q", c.Server.Addr, c.Metrics.Addr)
	}
	if c.Embedded() {
		for _, l := range []struct{ key, addr string }{{"server.addr", c.Server.Addr}, {"metrics.addr", c.Metrics.Addr}} {
			if l.addr != "" && sameListenPort(l.addr, c.Redis.EmbeddedAddr) {
				bad("redis.embedded_addr", "must not listen on %s's port (%q), got %q", l.key, l.addr, c.Redis.EmbeddedAddr)
			}
		}
	}
	if c.Server.ShutdownTimeout <= 0 {
		bad("server.shutdown_timeout", "must be > 0, got %s", c.Server.ShutdownTimeout)
	}
	if c.Server.ShutdownDelay < 0 || c.Server.ShutdownDelay > MaxShutdownDelay {
		bad("server.shutdown_delay", "must be 0..%s, got %s", MaxShutdownDelay, c.Server.ShutdownDelay)
	}
	if c.Server.MaxConnections < 1 || c.Server.MaxConnections > math.MaxInt32 {
		bad("server.max_connections", "must be 1..%d, got %d", math.MaxInt32, c.Server.MaxConnections)
	}
	if c.Redis.Addr != "" {
		if msg := checkHostPort(c.Redis.Addr, "redis.password"); msg != "" {
			bad("redis.addr", "must be host:port or empty (embedded Redis), %s", msg)
		}
	}
	for i, a := range c.Redis.Addrs {
		if msg := checkHostPort(a, "redis.password"); msg != "" {
			bad(fmt.Sprintf("redis.addrs[%d]", i), "must be host:port, %s", msg)
		}
	}
	if c.Redis.Addr != "" && len(c.Redis.Addrs) > 0 {
		bad("redis.addrs", "set either redis.addr (one Redis) or redis.addrs (a cluster), not both")
	}
	validateSentinel(c.Redis, bad)
	if c.Embedded() {
		if !isListenAddr(c.Redis.EmbeddedAddr) {
			bad("redis.embedded_addr", "must be host:port (host may be empty, port 0..65535 or a service name), got %q", c.Redis.EmbeddedAddr)
		}
		// It has only the default user: logged in as another, every
		// command failed WRONGPASS and the service was never ready.
		if c.Redis.Username != "" {
			bad("redis.username", "needs redis.addr, redis.addrs or redis.sentinel_addrs: the embedded Redis has only the default user")
		}
	}
	// go-redis logs in only with a password: a user named without one is
	// never sent, and the service would run as the default user (an ACL
	// user with nopass takes any password, so give it one).
	if c.Redis.Username != "" && c.Redis.Password == "" {
		bad("redis.username", "needs redis.password: without one the client never logs in as %q and runs as the default user "+
			"(a nopass user takes any password)", c.Redis.Username)
	}
	validateTLS(c, bad)
	if c.Redis.DB < 0 {
		bad("redis.db", "must be >= 0, got %d", c.Redis.DB)
	}
	if len(c.Redis.Addrs) > 0 && c.Redis.DB != 0 {
		bad("redis.db", "must be 0 in cluster mode, got %d", c.Redis.DB)
	}
	// Redis takes timeouts and BLOCK in whole milliseconds: less than one
	// would be sent as 0, which for BLOCK means forever.
	// At most an hour: sums and multiples of it (a read's deadline, the
	// eviction watch's budget) must not wrap.
	if c.Redis.Timeout < time.Millisecond || c.Redis.Timeout > time.Hour {
		bad("redis.timeout", "must be 1ms..1h, got %s", c.Redis.Timeout)
	}
	if c.Redis.Shards < 1 || c.Redis.Shards > 1024 {
		bad("redis.shards", "must be 1..1024, got %d", c.Redis.Shards)
	}
	if c.Redis.StreamMaxLen < 10_000 {
		bad("redis.stream_maxlen", "must be >= 10000 (it is a far-away safety bound), got %d", c.Redis.StreamMaxLen)
	}
	// At least a second: each renewal is a dial (and, with TLS, the files
	// read again), which under a second would cost more than the reports.
	if l := c.Redis.ConnMaxLifetime; l != 0 && (l < time.Second || l > maxRetention) {
		bad("redis.conn_max_lifetime", "must be 0 (off) or 1s..%s, got %s", maxRetention, l)
	}
	// At most 100,000: go-redis fills a semaphore with a token per
	// connection when it makes a client (a pool of 10 million took 1.9 s
	// per client; past 2^31-1 it panicked), and a Redis takes 10,000
	// clients by default (maxclients).
	if c.Redis.PoolSize < 0 || c.Redis.PoolSize > 100_000 {
		bad("redis.pool_size", "must be 0..100000 (0 = go-redis default), got %d", c.Redis.PoolSize)
	}
	w := c.Window
	// At most a day: the report script compares created_at - W as a
	// positive decimal string, which holds for any created_at the
	// contract accepts (>= 1e12 ms) only while W stays far below it.
	if w.Size < 10*time.Millisecond || w.Size > 24*time.Hour {
		bad("window.size", "must be 10ms..24h, got %s", w.Size)
	}
	// Each named on its own: an error that names window.size for a
	// fractional window.grace sends the operator to the wrong key.
	if w.Size%time.Millisecond != 0 {
		bad("window.size", "must be whole milliseconds, got %s", w.Size)
	}
	if w.Grace%time.Millisecond != 0 {
		bad("window.grace", "must be whole milliseconds, got %s", w.Grace)
	}
	// Upper bounds far past any use, so that sums and millisecond TTLs
	// built from them cannot overflow (W + grace wrapped negative and
	// passed every check that compared with it).
	if w.Grace < 0 || w.Grace > 24*time.Hour {
		bad("window.grace", "must be 0..24h, got %s", w.Grace)
	}
	if w.Dedupe < time.Second || w.Dedupe > maxRetention {
		bad("window.dedupe", "must be 1s..%s, got %s", maxRetention, w.Dedupe)
	}
	if w.Stale > maxRetention {
		bad("window.stale", "must be at most %s, got %s", maxRetention, w.Stale)
	}
	staleOK := w.Stale >= w.Size+w.Grace+2*time.Millisecond
	if !staleOK {
		bad("window.stale", "must exceed window.size + window.grace (%s) by at least 2ms, got %s", w.Size+w.Grace, w.Stale)
	}
	if strings.TrimSpace(c.Worker.Consumer) == "" {
		bad("worker.consumer", "must not be empty")
	}
	// XAUTOCLAIM's min-idle is whole milliseconds: 3200.5ms was sent as
	// 3200, not past W + grace as Validate had checked. Only against whole
	// window.size and window.grace: the default claim_idle derives from
	// them, and their own errors say what to fix (an error naming
	// claim_idle, which the operator never set, would not).
	windowWhole := w.Size%time.Millisecond == 0 && w.Grace%time.Millisecond == 0
	if windowWhole && c.Worker.ClaimIdle%time.Millisecond != 0 {
		bad("worker.claim_idle", "must be whole milliseconds, got %s", c.Worker.ClaimIdle)
	}
	// Only against a valid window.stale: its own error says what to fix,
	// and the default claim_idle derives from it.
	if staleOK && c.Worker.ClaimIdle <= w.Size+w.Grace {
		bad("worker.claim_idle", "must exceed window.size + window.grace (%s), got %s", w.Size+w.Grace, c.Worker.ClaimIdle)
	}
	if staleOK && c.Worker.ClaimIdle >= w.Stale {
		bad("worker.claim_idle", "must be below window.stale (%s), got %s: a claimed window would already be stale", w.Stale, c.Worker.ClaimIdle)
	}
	if c.Worker.ConsumerIdleDelete < c.Worker.ClaimIdle {
		bad("worker.consumer_idle_delete", "must be >= worker.claim_idle (%s), got %s", c.Worker.ClaimIdle, c.Worker.ConsumerIdleDelete)
	}
	// A read's reply and a flush pipeline must come back within
	// redis.timeout: a flush of a million windows did not, and every
	// window it carried waited seconds to be flushed again.
	if c.Worker.ReadCount < 1 || c.Worker.ReadCount > maxReadCount {
		bad("worker.read_count", "must be 1..%d, got %d", maxReadCount, c.Worker.ReadCount)
	}
	if c.Worker.BatchSize < 1 || c.Worker.BatchSize > maxBatchSize {
		bad("worker.batch_size", "must be 1..%d, got %d", maxBatchSize, c.Worker.BatchSize)
	}
	// On SIGTERM the drain waits out a read under way (go-redis does not
	// cut it short), so a long block holds up the exit; the one of
	// 2562047h overflowed the read's deadline, and every read failed.
	if c.Worker.Block < time.Millisecond || c.Worker.Block > maxBlock || c.Worker.Block%time.Millisecond != 0 {
		bad("worker.block", "must be whole milliseconds, 1ms..%s (XREADGROUP BLOCK 0 blocks forever), got %s", maxBlock, c.Worker.Block)
	}
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		bad("log.level", "must be debug, info, warn or error, got %q", c.Log.Level)
	}
	switch c.Log.Format {
	case "json", "console":
	default:
		bad("log.format", "must be json or console, got %q", c.Log.Format)
	}
	return errors.Join(errs...)
}

// minStaleMargin is the least window.stale past W + grace that is not
// warned of; minSensibleTimeout the least redis.timeout.
const (
	minStaleMargin     = time.Second
	minSensibleTimeout = 10 * time.Millisecond
)

// ReporterRetryHorizon bounds how long client.Reporter, with its default
// options, may send a batch again after its first attempt (backoffs plus
// attempts, up to about 32 s; a client test holds it to this, and to the
// 32 s that the dedupe warning and README quote).
const ReporterRetryHorizon = 35 * time.Second

// Warnings names settings that are valid but probably not meant: each
// costs something the operator should choose knowingly. main logs them at
// start.
func (c Config) Warnings() []string {
	var ws []string
	open := c.Window.Size + c.Window.Grace
	if c.Server.ShutdownTimeout < open {
		// Another replica publishes what is left, after worker.claim_idle,
		// but the drain cannot wait for every window this replica holds,
		// and the process then exits 1.
		ws = append(ws, fmt.Sprintf("server.shutdown_timeout (%s) is shorter than window.size + window.grace (%s): "+
			"on SIGTERM, windows that come due later are left to other replicas", c.Server.ShutdownTimeout, open))
	} else if need := satAdd(open+c.Worker.Block, c.Redis.Timeout); c.Server.ShutdownTimeout < need {
		// The drain's last read of the stream waits for the readers'
		// blocking read to end first, which Redis ends after worker.block
		// (go-redis does not cut it short), then its reply's redis.timeout.
		ws = append(ws, fmt.Sprintf("server.shutdown_timeout (%s) is shorter than window.size + window.grace + "+
			"worker.block + redis.timeout (%s): on SIGTERM the readers' blocking read is waited out first, so the "+
			"last reports' windows may be left unread, to other replicas", c.Server.ShutdownTimeout, need))
	}
	// A window is flushed once due, W + grace after opening; one whose
	// flush comes later than window.stale is dropped. A margin of a few ms
	// (Validate's bound is 2ms) dropped about a quarter of the windows on
	// an idle machine: a round trip, a batch's turn, a claim after a
	// replica died all take longer.
	if margin := c.Window.Stale - open; margin >= 2*time.Millisecond && margin < minStaleMargin {
		ws = append(ws, fmt.Sprintf("window.stale (%s) leaves %s past window.size + window.grace: "+
			"a window whose flush comes later (a busy replica, a Redis hiccup, a claim after a replica died) is dropped unpublished; "+
			"leave at least %s", c.Window.Stale, margin, minStaleMargin))
	}
	// Below a few ms a dial, or a loaded Redis's reply, takes longer:
	// reports then fail UNAVAILABLE while Redis works, their windows
	// perhaps pushed all the same.
	if c.Redis.Timeout < minSensibleTimeout {
		ws = append(ws, fmt.Sprintf("redis.timeout (%s) is below %s: dials and replies of a loaded Redis take longer, "+
			"and reports fail UNAVAILABLE while Redis works", c.Redis.Timeout, minSensibleTimeout))
	}
	switch {
	case c.Metrics.Pprof && c.Metrics.Addr == "":
		ws = append(ws, "metrics.pprof is on but metrics.addr is empty: /debug/pprof/ is served nowhere")
	case c.Metrics.Pprof && !loopback(c.Metrics.Addr):
		// The port has no login; a profile or trace slows the process for
		// its length, and one trace at a time shuts the operator's out.
		ws = append(ws, fmt.Sprintf("metrics.pprof is on and metrics.addr (%s) is reachable beyond this machine: "+
			"anyone who reaches it can profile and trace the process (it has no login); serve it on a private network only, "+
			"and turn pprof off once done", c.Metrics.Addr))
	}
	switch {
	case c.Window.Dedupe < open:
		// A report's window closes at most W + grace after the report
		// arrived; an id may be forgotten after window.dedupe.
		ws = append(ws, fmt.Sprintf("window.dedupe (%s) is shorter than window.size + window.grace (%s): "+
			"a report retried later than window.dedupe is counted twice, even in its own open window", c.Window.Dedupe, open))
	case c.Window.Dedupe < ReporterRetryHorizon:
		ws = append(ws, fmt.Sprintf("window.dedupe (%s) is shorter than %s, which covers client.Reporter's default retries (up to about 32 s): "+
			"a batch that got through but is retried that late is counted twice", c.Window.Dedupe, ReporterRetryHorizon))
	}
	// The report path holds, per node, a connection for each shard's shared
	// pipeline, one for the rest and one for a batch of its own (repo's
	// aloneSlots floors the batches at one): below that, calls queue for a
	// connection on redis.timeout's clock and may fail UNAVAILABLE, counted
	// or not, while Redis answers.
	// On one Redis every shard is on the node; a Cluster's masters share
	// them, in a way known only once its slot map is read.
	// The default (0) is checked too: 10 per CPU is 10 with GOMAXPROCS 1,
	// below what 9 shards need (a CPU limit gives GOMAXPROCS 2 at least).
	if pool, need := EffectivePoolSize(c.Redis.PoolSize), c.Redis.Shards+2; len(c.Redis.Addrs) == 0 && pool < need {
		set := fmt.Sprint(pool)
		if c.Redis.PoolSize == 0 {
			set = fmt.Sprintf("0: 10 per CPU, %d here", pool)
		}
		ws = append(ws, fmt.Sprintf("redis.pool_size (%s) is below redis.shards + 2 (%d): reports may wait for a connection "+
			"and fail UNAVAILABLE while Redis answers", set, need))
	}
	// A window open at a failover comes due up to W + grace after it and
	// goes stale window.stale after it opened; its flushes may stay on the
	// demoted master for up to the lifetime and its jitter (a tenth more).
	if l, room := c.Redis.ConnMaxLifetime, c.Window.Stale-open; l > 0 && l+l/10 > room {
		ws = append(ws, fmt.Sprintf("redis.conn_max_lifetime (%s, and a tenth more of jitter) is longer than window.stale less window.size + window.grace (%s): "+
			"windows open at a failover may go stale while their flushes stay on a demoted master that answers MASTERDOWN", l, room))
	}
	// Real Redis refuses clients from elsewhere without a password
	// (protected mode); the embedded one has no such guard (it runs only
	// the service's own scripts, main's onlyOwnScripts, but takes every
	// other command).
	if c.Embedded() && c.Redis.Password == "" && !loopback(c.Redis.EmbeddedAddr) {
		ws = append(ws, fmt.Sprintf("redis.embedded_addr (%s) is reachable beyond this machine with no redis.password: "+
			"anyone who reaches it can publish forged pushes and read or delete the windows", c.Redis.EmbeddedAddr))
	}
	return ws
}

// EffectivePoolSize is the go-redis pool per node that redis.pool_size
// gives: poolSize, or go-redis's default of 10 per CPU (GOMAXPROCS, which Go
// sets from a container's CPU limit) when it is 0.
func EffectivePoolSize(poolSize int) int {
	if poolSize > 0 {
		return poolSize
	}
	return 10 * runtime.GOMAXPROCS(0)
}

// loopback tells whether addr's host reaches this machine only: a
// loopback IP or "localhost"; an empty host listens on every interface.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// checkHostPort says what is wrong with addr as a Redis address, or "" if
// nothing. The value itself is never repeated: an address that is wrong
// may be a password put in the wrong key, or carry one (redis://:pw@host,
// pw@host:6379, host:6379,password=pw), and a refusal is logged. Nor does
// such a value pass: the started line logs the address, and go-redis's
// dial errors repeat it. The password goes in passwordKey: redis.password
// for a Redis, redis.sentinel_password for a Sentinel.
func checkHostPort(addr, passwordKey string) string {
	hidden := " (the value is not repeated: it may hold a password, which goes in " + passwordKey + ")"
	if strings.ContainsAny(addr, "@/?,=") {
		return "got a URL, userinfo or options" + hidden
	}
	if strings.ContainsFunc(addr, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) {
		return "got a space or a control character in it" + hidden
	}
	host, port, err := net.SplitHostPort(addr)
	switch {
	case err != nil && unbracketedIPv6(addr):
		// ::1:6379: net.SplitHostPort says "too many colons".
		return "got more than one ':' outside brackets: an IPv6 address goes in brackets, [::1]:6379" + hidden
	case err != nil && strings.HasPrefix(addr, "[") && strings.Index(addr, "]") == len(addr)-1:
		return "got no port after the brackets ([::1]:6379)" + hidden
	case err != nil || host == "":
		return "got no host:port" + hidden
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
		return "got a port that is no number 1..65535" + hidden
	}
	return ""
}

// unbracketedIPv6 says whether addr is an IPv6 address written without its
// brackets, with a port after it (::1:6379) or none (::1); not a host with
// more than one ':' (redis.internal:6379:0), which is no IPv6 address.
func unbracketedIPv6(addr string) bool {
	// netip, not net.ParseIP: a link-local address carries its zone
	// (fe80::1%eth0:6379).
	isIPv6 := func(s string) bool { a, err := netip.ParseAddr(s); return err == nil && a.Is6() }
	if isIPv6(addr) {
		return true
	}
	i := strings.LastIndex(addr, ":")
	return i > 0 && isIPv6(addr[:i])
}

// maxRetention bounds window.dedupe and window.stale: 30 days.
const maxRetention = 720 * time.Hour

// Bounds of the worker's settings (see Validate).
const (
	maxReadCount = 10_000
	maxBatchSize = 4_096
	maxBlock     = 30 * time.Second
)

// satAdd is a + b, saturated at the largest Duration instead of wrapping.
func satAdd(a, b time.Duration) time.Duration {
	if b > 0 && a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// sameListenPort reports whether listeners on a and b (both valid listen
// addresses) would take the same port: the same port, not 0 (a free one),
// on the same host or where either listens on every address.
func sameListenPort(a, b string) bool {
	ha, pa, errA := net.SplitHostPort(a)
	hb, pb, errB := net.SplitHostPort(b)
	if errA != nil || errB != nil {
		return false
	}
	na, errA := net.LookupPort("tcp", pa)
	nb, errB := net.LookupPort("tcp", pb)
	if errA != nil || errB != nil || na == 0 || na != nb {
		return false
	}
	wildcard := func(h string) bool { return h == "" || h == "0.0.0.0" || h == "::" }
	return ha == hb || wildcard(ha) || wildcard(hb)
}

// isListenAddr: addr is an address to listen on, host:port with a port
// that net.Listen takes (a number 0..65535, a service name such as http;
// 0 or none: any free port). A port out of range passed as host:port and
// failed only at listen, naming the value but not the key.
func isListenAddr(addr string) bool {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	// A host is empty, an IP or a name: "pw@host:0" passed, and failed
	// only at start, in a DNS lookup.
	if strings.ContainsFunc(host, func(r rune) bool {
		return !(r < unicode.MaxASCII && (unicode.IsLetter(r) || unicode.IsDigit(r) || strings.ContainsRune(".-_:%", r)))
	}) {
		return false
	}
	_, err = net.LookupPort("tcp", port)
	return err == nil
}
