package worker_test

import (
	"context"
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

// A master is paused (SIGSTOP) just before a window comes due, so its
// flush waits on the paused master's socket. A Sentinel promotes the
// replica, and go-redis's failover client, hearing +switch-master, closes
// its connections to the old master, the one the flush waits on too: the
// flush fails at once, well before its deadline (when its sender would
// have stopped waiting: the read timeout), and the window goes again, to
// the new master, which pushes it. The old master still holds the first
// send and runs it on resuming, before the Sentinel demotes it. Resumed
// once that send's deadline has passed, it must change nothing (the flush
// script answers Late): the window is pushed once. (Resumed before the
// deadline, it pushes the window too, whenever the worker sent it again:
// no wait of the worker's can prevent that; see README, Redis Sentinel.)
func TestFlushCutShortBySentinelSwitchIsLateOnOldMasterResumedPastItsDeadline(t *testing.T) {
	// The flush's wait, longer than the switch takes (about 2 s), so that
	// the switch, not the read timeout, ends it.
	const wait = 3 * time.Second
	ctx := context.Background()
	old := testredis.Start(t, testredis.Options{})
	replica := testredis.StartReplica(t, old)
	sentinel := testredis.StartSentinels(t, 1, "m", old)[0]
	rdb := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName: "m", SentinelAddrs: []string{sentinel.Addr},
		DialTimeout: wait, ReadTimeout: wait, WriteTimeout: wait, PoolTimeout: wait,
		MaxRetries: -1, ContextTimeoutEnabled: true, DialerRetries: 1, // as the service's
	})
	t.Cleanup(func() { rdb.Close() })
	r := newRepo(t, rdb, time.Second, 1)
	// The Sentinel kills the promoted replica's subscribers (CLIENT KILL
	// TYPE pubsub); the old master's stay until it is demoted.
	oldSub := subscribeAt(t, old.Addr)

	m := metrics.New(prometheus.NewRegistry())
	wk := worker.New(r, worker.Config{Consumer: "a", ClaimIdle: time.Hour, Block: 100 * time.Millisecond, OpTimeout: wait},
		zaptest.NewLogger(t), m)
	wk.Start()
	defer wk.Shutdown(context.Background())
	if _, err := r.Report(ctx, []*combo.Contribution{contribution(1, 7)}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the window read", func() bool { return wk.Held() == 1 })
	// The replica holds the window and its delivery to consumer a.
	if n, err := old.Client().Do(ctx, "WAIT", 1, 1000).Int(); err != nil || n != 1 {
		t.Fatalf("WAIT: %d %v", n, err)
	}
	old.Pause()
	paused := time.Now()

	waitFor(t, "the window pushed by the new master", func() bool {
		return testutil.ToFloat64(m.WindowsFlushed.WithLabelValues(metrics.FlushedPublished)) == 1
	})
	if addr, err := sentinel.Client().Do(ctx, "SENTINEL", "get-master-addr-by-name", "m").StringSlice(); err != nil ||
		len(addr) != 2 || addr[0]+":"+addr[1] != replica.Addr {
		t.Fatalf("the Sentinel names %v (%v) as the master, want the replica %s", addr, err, replica.Addr)
	}
	t.Logf("pushed by the new master %v after the pause", time.Since(paused))
	// The window's first flush went to the paused master and got no answer.
	if n := testutil.ToFloat64(m.RedisErrors.WithLabelValues(metrics.OpFlush)); n == 0 {
		t.Fatal("no flush failed on the paused master: the test did not test")
	}
	// Every send to the old master went before the new master pushed
	// (the client had switched by then), so each one's deadline, on the
	// node's clock, is at most wait after now. Timing is the point here:
	// the old master resumes once that has passed, with a margin.
	time.Sleep(wait + 500*time.Millisecond)
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
