package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/combo-service/combo-service/conf"
	"github.com/combo-service/combo-service/internal/testredis"
	"github.com/combo-service/combo-service/metrics"
)

// A node removed with `redis-cli --cluster del-node` and left running
// answers CLUSTER SLOTS with no slot, and go-redis keeps asking it (among
// the nodes it knows) for a minute. It took that answer as the slot map:
// with no slot known, commands went to any node, and reports and flushes
// failed MOVED or CLUSTERDOWN for up to a minute on shards that never
// moved (seen in a resharding walkthrough). Such an answer is refused,
// and the client asks another node.
func TestClusterClientAsksAnotherNodeThanOneInNoCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test skipped in -short")
	}
	cluster := testredis.StartCluster(t, 3)
	removed := testredis.StartClusterNode(t)
	cfg := conf.Default()
	// The removed node first among the seeds; go-redis asks them in a
	// random order, a client in two asks it first.
	cfg.Redis.Addrs = []string{removed.Addr, cluster.Addrs[0]}
	_, newClient, closeAll, err := openRedis(cfg, testLogger(t), prometheus.NewRegistry(), metrics.New(prometheus.NewRegistry()))
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll()
	ctx := context.Background()
	for i := range 16 {
		c := newClient(1)
		for k := range 12 { // keys on every master
			if err := c.Set(ctx, fmt.Sprintf("combo-test:%d:%d", i, k), 1, time.Minute).Err(); err != nil {
				t.Fatalf("client %d, key %d: %v; want every key written through the masters", i, k, err)
			}
		}
	}
}

// While no node answers a slot map (here the only one is in no cluster:
// a cluster not created yet), a command fails naming the node and what
// its answer may mean, not the first such cause a reader would guess.
func TestClusterClientNamesANodeThatServesNoSlot(t *testing.T) {
	lone := testredis.StartClusterNode(t)
	cfg := conf.Default()
	cfg.Redis.Addrs = []string{lone.Addr}
	_, newClient, closeAll, err := openRedis(cfg, testLogger(t), prometheus.NewRegistry(), metrics.New(prometheus.NewRegistry()))
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll()
	err = newClient(1).Set(context.Background(), "combo-test:k", 1, time.Minute).Err()
	if err == nil || !strings.Contains(err.Error(), lone.Addr+" serves no slot (CLUSTER SLOTS answered none): the cluster is not created yet") {
		t.Fatalf("SET = %v, want it to name %s as serving no slot", err, lone.Addr)
	}
}
