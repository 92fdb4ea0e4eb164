package main

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/combo-service/combo-service/metrics"
)

// shardNodesEvery is how often shardNodeWatch reads the slot map again,
// as go-redis holds it: go-redis reloads its copy when a node answers
// MOVED (a moved shard's next report or flush) and, on the service's
// clients, once it is clusterStateReload old, on the client's next command
// (this loop's readings trigger that too), so a reshard is seen within 10 s
// of the service's next command to a moved shard, and any other change of
// the map within two readings at most. A failover changes no node's bound:
// the promoted replica serves its master's shards, numbered as before (see
// repo.ShardNodes); it is the client's routing that must follow it, which
// clusterStateReload bounds. A variable so that tests can shorten it.
var shardNodesEvery = 10 * time.Second

// shardNodeWatch keeps the bound on a Redis Cluster node's batch pipelines
// sized by the shards that node serves now (repo.RefreshShardNodes). Read
// only at start, the bounds missed a reshard until the next start, and a
// start made while the slot map could not be read counted every shard on
// one node: one batch pipeline at a time for the whole service. It is not
// started on one Redis, where there is nothing to follow.
//
// Shutdown order: it stops as run returns, after the worker's shutdown,
// and before the Redis client it reads through closes (run's deferred
// closeRedis, deferred before it).
type shardNodeWatch struct {
	refresh func(context.Context) (changed bool, err error)
	every   time.Duration
	timeout time.Duration // of one reading
	log     *zap.Logger   // sampled: a cluster that stays unreadable logs once a second at most
	m       *metrics.Metrics
	loop    *ticking
}

func newShardNodeWatch(refresh func(context.Context) (bool, error), every, timeout time.Duration, log *zap.Logger, m *metrics.Metrics) *shardNodeWatch {
	return &shardNodeWatch{refresh: refresh, every: every, timeout: timeout, log: log, m: m}
}

// Start runs the loop until Stop.
func (w *shardNodeWatch) Start() {
	w.loop = startTicking(w.every, w.once)
}

// once reads the slot map one time; a panic is logged, counted, and the
// loop goes on.
func (w *shardNodeWatch) once(ctx context.Context) {
	defer func() {
		if p := recover(); p != nil {
			w.m.LoopPanics.WithLabelValues(metrics.LoopShardNodes).Inc()
			w.log.Error("recovered panic in the shard node loop", zap.Any("panic", p), zap.Stack("stack"))
		}
	}()
	readCtx, cancel := context.WithTimeout(ctx, w.timeout)
	defer cancel()
	changed, err := w.refresh(readCtx)
	switch { // a reading cut short by Stop is no news
	case err != nil && ctx.Err() == nil:
		w.log.Warn("could not read which node serves each shard; the batch pipelines' bounds stay as they were", zap.Error(err))
	case changed:
		w.log.Info("which node serves each shard changed, or was read for the first time; batch pipelines are now bounded by each node's own shards")
	case err == nil:
		// At debug: a line every reading would be noise at info. It shows
		// the loop reads (TestServiceFollowsAReshard waits for it).
		w.log.Debug("read which node serves each shard: unchanged")
	}
}

// Stop ends the loop and waits for it.
func (w *shardNodeWatch) Stop() { w.loop.stop() }
