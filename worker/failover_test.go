package worker_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap/zaptest"

	"github.com/combo-service/combo-service/internal/testredis"
	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/metrics"
	"github.com/combo-service/combo-service/worker"
)

// A master is paused (SIGSTOP) while a window comes due, its replica is
// promoted and the worker's client follows it, as with redis.timeout
// (the client's read timeout, 500 ms by default) shorter than the
// worker's 2 s flush timeout. Each flush sent to the paused master waits
// there; its sender stops waiting after the read timeout and sends the
// window again 200 ms later, at last to the new master, which pushes it.
// When the old master resumes, the flush it holds was sent well under
// 2 s before: its deadline must be when its sender stopped waiting for
// that send, not the op's 2 s, or it finds the window in the old
// master's copy and pushes it a second time.
func TestFlushSentAgainToANewMasterDoesNotRunOnTheResumedOldOne(t *testing.T) {
	const readTimeout = 300 * time.Millisecond
	ctx := context.Background()
	old := testredis.Start(t, testredis.Options{})
	replica := testredis.StartReplica(t, old)
	var target atomic.Pointer[string]
	target.Store(&old.Addr)
	rdb := redis.NewClient(&redis.Options{
		Addr: old.Addr,
		Dialer: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, *target.Load()) // where the master is now
		},
		DialTimeout: readTimeout, ReadTimeout: readTimeout, WriteTimeout: readTimeout, PoolTimeout: readTimeout,
		MaxRetries: -1, ContextTimeoutEnabled: true,
	})
	t.Cleanup(func() { rdb.Close() })
	r := newRepo(t, rdb, time.Second, 1)
	warmPipelinePool(t, rdb, 2)
	oldSub, newSub := subscribeAt(t, old.Addr), subscribeAt(t, replica.Addr)

	m := metrics.New(prometheus.NewRegistry())
	wk := worker.New(r, worker.Config{Consumer: "a", ClaimIdle: time.Hour, Block: 100 * time.Millisecond},
		zaptest.NewLogger(t), m)
	wk.Start()
	defer stop(t, wk)
	if _, err := r.Report(ctx, []*combo.Contribution{contribution(1, 7)}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the window read", func() bool { return wk.Held() == 1 })
	// The replica holds the window and its delivery to consumer a.
	if n, err := old.Client().Do(ctx, "WAIT", 1, 1000).Int(); err != nil || n != 1 {
		t.Fatalf("WAIT: %d %v", n, err)
	}
	old.Pause()
	if err := replica.Client().ReplicaOf(ctx, "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	target.Store(&replica.Addr)

	select {
	case <-newSub.Channel():
	case <-time.After(15 * time.Second):
		t.Fatal("the new master never pushed the window")
	}
	// The window's first flush went to the paused master and got no answer.
	if n := testutil.ToFloat64(m.RedisErrors.WithLabelValues(metrics.OpFlush)); n == 0 {
		t.Fatal("no flush failed on the paused master: the test did not test")
	}
	old.Resume()
	// What waited on the old master's sockets runs first; a PING sent
	// after it on the subscription's connection is answered after any
	// push it published there.
	if err := old.Client().Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if msg, err := testredis.MessageBeforePong(ctx, oldSub); err != nil {
		t.Fatal(err)
	} else if msg != nil {
		t.Fatalf("the resumed old master pushed the window again: %s", msg.Payload)
	}
}
