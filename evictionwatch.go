package main

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/combo-service/combo-service/metrics"
)

// nodeMayEvict warns of a node read evicting, where its role is not known
// (one Redis, a Cluster's node, any node the watch reads): a replica
// evicts nothing of its own (replica-ignore-maxmemory) until a failover
// promotes it, with its own policy.
const nodeMayEvict = "a Redis node may evict this service's keys (as the master, or a replica once a failover " +
	"promotes it): maxmemory-policy must be noeviction, or windows, dedupe ids and the stream can be lost " +
	"under memory pressure"

// evictionRule is what the eviction watch watches: a node's maxmemory-policy,
// unsafe unless noeviction.
var evictionRule = nodeRule{
	name:       "eviction watch",
	setting:    "maxmemory-policy",
	field:      "maxmemory_policy",
	unsafe:     func(policy string) bool { return policy != "noeviction" },
	warn:       nodeMayEvict,
	safe:       "Redis node no longer evicts: its maxmemory-policy is noeviction",
	forgotten:  "Redis node found evicting is no longer among the nodes; forgotten",
	gauge:      func(m *metrics.Metrics) prometheus.Gauge { return m.RedisNodesEvicting },
	loop:       metrics.LoopEvictionWatch,
	sayRefused: true,
}

// newEvictionWatch is the nodeWatch of every Redis node's maxmemory-policy
// (read as the start check does: policyReader), exported in
// combo_redis_nodes_evicting, which the ComboRedisMayEvict alert reads.
// It starts from the nodes the start check found evicting (warnEvicting,
// already logged), and it is the watch that warns of a login refused.
func newEvictionWatch(read func(context.Context) (map[string]string, error), every, timeout time.Duration,
	known map[string]string, log *zap.Logger, m *metrics.Metrics) *nodeWatch {
	return newNodeWatch(read, evictionRule, every, timeout, known, log, m)
}
