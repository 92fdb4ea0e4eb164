package main

import (
	"context"
	"maps"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/combo-service/combo-service/metrics"
)

// evictionWatchEvery is how often evictionWatch reads the policies again.
const evictionWatchEvery = time.Minute

// evictionWatch reads the maxmemory-policy of every Redis node the start
// check asks (one Redis; with Sentinel, the master and the replicas the
// Sentinels list; on a Cluster, masters and replicas: a failover makes a
// replica the master with its own policy; see policyReader) again each
// minute, exports how many may evict
// (combo_redis_nodes_evicting, which the ComboRedisMayEvict alert reads)
// and logs each node that starts or stops evicting. The check at start
// alone missed a replica started before its Redis (compose, Kubernetes:
// the start could not read it and nothing asked again) and a Redis
// restarted later with another policy. A node that is not read keeps what
// it was last read as; one no longer among the nodes (removed from a
// Cluster) is forgotten. It is not started with the embedded Redis, which
// has no policy.
//
// Shutdown order: it stops as run returns, after the worker's shutdown,
// and before the Redis client it reads through closes (run's deferred
// closeRedis, deferred before it).
type evictionWatch struct {
	read    func(context.Context) (map[string]string, error) // repo.Policies
	every   time.Duration
	timeout time.Duration // of one reading
	log     *zap.Logger
	m       *metrics.Metrics
	known   map[string]string // node -> policy, of nodes found evicting
	loop    *ticking
}

// newEvictionWatch starts from the nodes the start check found evicting
// (already logged).
func newEvictionWatch(read func(context.Context) (map[string]string, error), every, timeout time.Duration,
	known map[string]string, log *zap.Logger, m *metrics.Metrics) *evictionWatch {
	w := &evictionWatch{read: read, every: every, timeout: timeout, log: log, m: m,
		known: maps.Clone(known)}
	if w.known == nil {
		w.known = map[string]string{}
	}
	m.RedisNodesEvicting.Set(float64(len(w.known)))
	return w
}

// Start runs the loop until Stop.
func (w *evictionWatch) Start() {
	w.loop = startTicking(w.every, w.once)
}

// once reads the policies one time; a panic is logged, counted, and the
// loop goes on.
func (w *evictionWatch) once(ctx context.Context) {
	defer func() {
		if p := recover(); p != nil {
			w.m.LoopPanics.WithLabelValues(metrics.LoopEvictionWatch).Inc()
			w.log.Error("recovered panic in the eviction watch loop", zap.Any("panic", p), zap.Stack("stack"))
		}
	}()
	readCtx, cancel := context.WithTimeout(ctx, w.timeout)
	defer cancel()
	read, err := w.read(readCtx)
	if ctx.Err() != nil {
		return // a reading cut short by Stop is no news
	}
	for _, node := range slices.Sorted(maps.Keys(read)) {
		policy, was := read[node], w.known[node]
		switch {
		case policy == "noeviction" && was != "":
			w.log.Info("Redis node no longer evicts: its maxmemory-policy is noeviction", zap.String("node", node))
			delete(w.known, node)
		case policy != "noeviction" && policy != was:
			w.log.Warn("Redis may evict this service's keys: maxmemory-policy must be noeviction, "+
				"or windows, dedupe ids and the stream can be lost under memory pressure",
				zap.String("node", node), zap.String("maxmemory_policy", policy))
			w.known[node] = policy
		}
	}
	if err != nil {
		// A node down is no news here (the replica's other loops say
		// so); a login refused is: a node restarted without the service's
		// ACL user rejoins as a replica silently, and fails every report
		// of its shards once a failover makes it the master; a Sentinel
		// restarted without redis.sentinel_username's user is met by
		// go-redis only when it needs it (sentinelRead).
		if refused := refusingUser(err); refused != "" {
			w.log.Warn("a login was refused while reading the Redis nodes' maxmemory-policy"+refused, zap.Error(err))
		} else {
			w.log.Debug("could not read every Redis node's maxmemory-policy", zap.Error(err))
		}
	}
	// Those not read keep what they were last read as; with every node
	// read (a Sentinel's refusal beside them is no node unread), those no
	// longer among them are forgotten.
	if nodesUnread(err) == nil {
		for _, node := range slices.Sorted(maps.Keys(w.known)) {
			if _, ok := read[node]; !ok {
				w.log.Info("Redis node found evicting is no longer among the nodes; forgotten", zap.String("node", node))
				delete(w.known, node)
			}
		}
	}
	w.m.RedisNodesEvicting.Set(float64(len(w.known)))
}

// Stop ends the loop and waits for it.
func (w *evictionWatch) Stop() { w.loop.stop() }
