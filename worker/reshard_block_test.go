package worker_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap/zaptest"

	"github.com/combo-service/combo-service/metrics"
	"github.com/combo-service/combo-service/repo"
	"github.com/combo-service/combo-service/worker"
)

// While a shard's slot is half moved, its stream already on the new
// master, the reader's XREADGROUP ... BLOCK is answered ASK by the old
// master. go-redis sends it on to the new one as a pipeline (ASKING, the
// read), whose reply it waits for only its ReadTimeout (redis.timeout,
// 500 ms by default), not the BLOCK: with worker.block (1 s) above
// redis.timeout, every read of the shard failed "i/o timeout", counted in
// combo_redis_errors_total{op="read"} and logged "redis read failed;
// retrying", its connection dropped and dialled again, for as long as the
// slot stays half moved, though Redis answered every command.
func TestBlockedReadRedirectedWhileItsSlotMovesDoesNotFail(t *testing.T) {
	c := newClusterCase(t)
	keys := c.r.Keys()
	from, to := c.shard0Move()
	timeout := 500 * time.Millisecond // redis.timeout's default; openRedis's options
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.cluster.Addrs,
		DialTimeout: timeout, ReadTimeout: timeout, WriteTimeout: timeout, PoolTimeout: timeout,
		MaxRetries: -1, ContextTimeoutEnabled: true, DialerRetries: 1})
	t.Cleanup(func() { cc.Close() })
	r := repo.New(cc, repo.Settings{Window: clusterWindow, Grace: 20 * time.Millisecond, Dedupe: time.Minute,
		Stale: time.Minute, Timeout: timeout, Shards: clusterShards, StreamMaxLen: 100000})
	m := metrics.New(prometheus.NewRegistry())
	wk := worker.New(r, worker.Config{Consumer: "c1", Shards: clusterShards, ClaimIdle: time.Hour, Block: time.Second, NodePerShard: true},
		zaptest.NewLogger(t), m)
	wk.Start()
	t.Cleanup(func() { stop(t, wk) })
	c.report(0) // pushed: shard 0's reader reads
	waitPushes(t, c.sub, 1)
	before := testutil.ToFloat64(m.RedisErrors.WithLabelValues(metrics.OpRead))
	mig := c.cluster.BeginMigration(t, keys.Stream(0), from, to)
	mig.Move(keys.Stream(0)) // half moved: the stream on the new master, the slot still the old one's
	// Long enough for several reads, each failing after redis.timeout
	// before: no event marks a read that did not fail.
	time.Sleep(4 * time.Second)
	failed := testutil.ToFloat64(m.RedisErrors.WithLabelValues(metrics.OpRead)) - before
	mig.Finish()
	c.report(0)
	waitPushes(t, c.sub, 1)
	if failed > 0 {
		t.Errorf("%v reads failed in 4 s while shard 0's slot was half moved (Redis answered them all), want 0", failed)
	}
}
