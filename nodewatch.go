package main

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/combo-service/combo-service/conf"
	"github.com/combo-service/combo-service/metrics"
	"github.com/combo-service/combo-service/repo"
)

// nodeWatchEvery is how often a nodeWatch reads its nodes again.
const nodeWatchEvery = time.Minute

// nodeForgetAfter is how many complete readings in a row a node found
// unsafe must be missing from before it is forgotten: a Sentinel just
// reset (SENTINEL RESET, which README gives to forget a removed replica)
// lists no replica at all for seconds (8.4 s measured), and one reading
// in that gap forgot every live replica, the gauge and its alert dropping
// for a minute.
const nodeForgetAfter = 2

// nodeWatch reads one setting of every Redis node the start checks ask
// (one Redis; with Sentinel, the master and the replicas the Sentinels
// list; on a Cluster, masters and replicas: a failover makes a replica
// the master with its own configuration; see nodeReader) again every
// interval, exports how many nodes are last read with an unsafe value
// (a gauge an alert reads), and logs each node that turns unsafe or safe
// again. A check at start alone misses a replica started before its Redis
// (compose, Kubernetes: the start could not read it and nothing asked
// again), a Redis restarted later with another configuration, and a node
// added or promoted later. A node that is not read keeps what it was last
// read as; one no longer among the nodes (removed from a Cluster) is
// forgotten once nodeForgetAfter complete readings leave it out. The
// watches (newEvictionWatch, newAppendOnlyWatch) differ only in their
// nodeRule. None is started with the embedded Redis.
//
// Shutdown order: it stops as run returns, after the worker's shutdown,
// and before the Redis client it reads through closes (run's deferred
// closeRedis, deferred before it).
type nodeWatch struct {
	read    func(context.Context) (map[string]string, error) // node -> value
	rule    nodeRule
	every   time.Duration
	timeout time.Duration // of one reading
	log     *zap.Logger
	m       *metrics.Metrics
	known   map[string]string // node -> value, of nodes found unsafe
	missed  map[string]int    // node -> complete readings in a row without it, of known
	loop    *ticking
}

// nodeRule is what a nodeWatch watches for, and how it says so.
type nodeRule struct {
	name      string // the watch's, as logs name it ("eviction watch")
	setting   string // as logs name it ("maxmemory-policy")
	field     string // the log field of a node's value ("maxmemory_policy")
	unsafe    func(value string) bool
	warn      string // logged of a node read unsafe
	safe      string // logged of a node found unsafe, read safe again
	forgotten string // logged of a node found unsafe, no longer among the nodes
	gauge     func(*metrics.Metrics) prometheus.Gauge
	loop      string // its label in combo_loop_panics_total
	// sayRefused warns of a login refused at each reading, and counts
	// the refusals in combo_redis_logins_refused. One watch does, so a
	// refusal is not said twice a minute.
	sayRefused bool
}

// newNodeWatch starts from the nodes the start check found unsafe
// (already logged).
func newNodeWatch(read func(context.Context) (map[string]string, error), rule nodeRule, every, timeout time.Duration,
	known map[string]string, log *zap.Logger, m *metrics.Metrics) *nodeWatch {
	w := &nodeWatch{read: read, rule: rule, every: every, timeout: timeout, log: log, m: m,
		known: maps.Clone(known), missed: map[string]int{}}
	if w.known == nil {
		w.known = map[string]string{}
	}
	rule.gauge(m).Set(float64(len(w.known)))
	return w
}

// Start runs the loop until Stop.
func (w *nodeWatch) Start() {
	w.loop = startTicking(w.every, w.once)
}

// once reads the nodes one time; a panic is logged, counted, and the
// loop goes on.
func (w *nodeWatch) once(ctx context.Context) {
	defer func() {
		if p := recover(); p != nil {
			w.m.LoopPanics.WithLabelValues(w.rule.loop).Inc()
			w.log.Error("recovered panic in the "+w.rule.name+" loop", zap.Any("panic", p), zap.Stack("stack"))
		}
	}()
	readCtx, cancel := context.WithTimeout(ctx, w.timeout)
	defer cancel()
	read, err := w.read(readCtx)
	if ctx.Err() != nil {
		return // a reading cut short by Stop is no news
	}
	for _, node := range slices.Sorted(maps.Keys(read)) {
		value, was := read[node], w.known[node]
		delete(w.missed, node)
		switch {
		case !w.rule.unsafe(value) && was != "":
			w.log.Info(w.rule.safe, zap.String("node", node), zap.String(w.rule.field, value))
			delete(w.known, node)
		case w.rule.unsafe(value) && value != was:
			w.log.Warn(w.rule.warn, zap.String("node", node), zap.String(w.rule.field, value))
			w.known[node] = value
		}
	}
	if w.rule.sayRefused {
		nodes, sentinels := refusedLogins(err)
		w.m.RedisLoginsRefused.WithLabelValues("node").Set(float64(nodes))
		w.m.RedisLoginsRefused.WithLabelValues("sentinel").Set(float64(sentinels))
	}
	if err != nil {
		// A node down is no news here (the replica's other loops say
		// so); a login refused is: a node restarted without the service's
		// ACL user rejoins as a replica silently, and fails every report
		// of its shards once a failover makes it the master; a Sentinel
		// restarted without redis.sentinel_username's user is met by
		// go-redis only when it needs it (sentinelRead).
		if refused := refusingUser(err); refused != "" && w.rule.sayRefused {
			w.log.Warn("a login was refused while reading the Redis nodes' "+w.rule.setting+refused, zap.Error(err))
		} else {
			w.log.Debug("could not read every Redis node's "+w.rule.setting, zap.Error(err))
		}
	}
	// Those not read keep what they were last read as; with every node
	// read (a Sentinel's refusal beside them is no node unread, and a
	// Cluster's failed node keeps itself alone), those no longer among
	// them for nodeForgetAfter such readings are forgotten.
	if nodesUnread(err) == nil {
		failed := failedNodes(err)
		for _, node := range slices.Sorted(maps.Keys(w.known)) {
			if _, ok := read[node]; ok || failed[node] {
				delete(w.missed, node) // a failed node is there, if not read
				continue
			}
			if w.missed[node]++; w.missed[node] >= nodeForgetAfter {
				w.log.Info(w.rule.forgotten, zap.String("node", node))
				delete(w.known, node)
				delete(w.missed, node)
			}
		}
	}
	w.rule.gauge(w.m).Set(float64(len(w.known)))
}

// Stop ends the loop and waits for it.
func (w *nodeWatch) Stop() { w.loop.stop() }

// startNodeWatches starts the eviction and append-only watches, every
// apart, from what the start checks found (node -> value, already
// logged), each logging under its own name, and returns what stops both.
func startNodeWatches(cfg conf.Redis, store *repo.Repo, every time.Duration, evicting, notAppendOnly map[string]string,
	log *zap.Logger, m *metrics.Metrics) (stop func()) {
	// Their loggers are not sampled: the lines of one reading share a
	// message, one per node, and a logger sampled by message wrote the
	// first node's alone, the others never named (each node's line comes
	// once, when it changes). A reading comes each minute, so no line
	// repeats faster than that.
	read, timeout := policyReader(cfg, store)
	ew := newEvictionWatch(read, every, timeout, evicting, log.Named("eviction_watch"), m)
	read, timeout = appendOnlyReader(cfg, store)
	aw := newAppendOnlyWatch(read, every, timeout, notAppendOnly, log.Named("appendonly_watch"), m)
	ew.Start()
	aw.Start()
	return func() {
		aw.Stop()
		ew.Stop()
	}
}

// nodeReader is how a nodeWatch reads its nodes, as the start checks do,
// and the time a reading may take: all, one setting of every node the
// Repo asks (one Redis; a Cluster's masters and replicas, by repo's
// eachNode), or, with Sentinel, one (a node's setting) of the master the
// Sentinels name and of the replicas they list, by sentinelRead, which
// may ask each Sentinel twice and then the nodes, each on a new
// connection go-redis opens with HELLO: three round trips a Sentinel, and
// two for the nodes' readings, run at once.
func nodeReader(cfg conf.Redis, all func(context.Context) (map[string]string, error),
	one func(context.Context, *redis.Client) (string, error)) (func(context.Context) (map[string]string, error), time.Duration) {
	tlsConfig, err := cfg.TLSConfig() // read and checked by Validate already
	if !cfg.Sentinel() || err != nil {
		return all, cfg.Timeout
	}
	read := func(ctx context.Context) (map[string]string, error) {
		_, values, err := sentinelRead(ctx, cfg, tlsConfig, one)
		return values, err
	}
	return read, time.Duration(3*len(cfg.SentinelAddrs)+2) * cfg.Timeout
}
