package worker_test

import (
	"context"
	"os"
	"sync"
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

// A master is paused (SIGSTOP) as a window's flush is about to be sent to
// it, so the flush waits on the paused master's socket. A Sentinel promotes
// the replica, and go-redis's failover client, hearing +switch-master, closes
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
	// The flush's wait, well past what the switch takes (2.1-2.4 s), so
	// that the switch, not the read timeout, ends it, on a loaded machine
	// too (checked below).
	const wait = 5 * time.Second
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
	hold := &holdFirstFlush{sha: flushScriptHash(t), flushing: make(chan struct{}), paused: make(chan struct{})}
	rdb.AddHook(hold)
	r := newRepo(t, rdb, time.Second, 1)
	warmPipelinePool(t, rdb, 2)
	// The Sentinel kills the promoted replica's subscribers (CLIENT KILL
	// TYPE pubsub); the old master's stay until it is demoted.
	oldSub := subscribeAt(t, old.Addr)

	m := metrics.New(prometheus.NewRegistry())
	wk := worker.New(r, worker.Config{Consumer: "a", ClaimIdle: time.Hour, Block: 100 * time.Millisecond, OpTimeout: wait},
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
	// The master is paused only now, when the flush is on its way: paused
	// earlier, before the window came due, the client could follow the
	// Sentinel to the new master first (1 to 2.5 s after a pause, in runs
	// here), and a flush sent after that tests nothing.
	select {
	case <-hold.flushing:
	case <-time.After(10 * time.Second):
		t.Fatal("no flush of the window within 10 s")
	}
	old.Pause()
	paused := time.Now()
	close(hold.paused)

	// The window's first flush went to the paused master and got no
	// answer: cut short by the switch, before its read timeout (ended by
	// that, the test would pass while testing nothing of the switch).
	waitFor(t, "a flush failed on the paused master", func() bool {
		return testutil.ToFloat64(m.RedisErrors.WithLabelValues(metrics.OpFlush)) > 0
	})
	if failed := time.Since(paused); failed >= wait {
		t.Fatalf("the flush on the paused master failed %s after the pause, at its read timeout (%s), "+
			"not cut short by the switch: the test did not test", failed, wait)
	}
	waitFor(t, "the window pushed by the new master", func() bool {
		return testutil.ToFloat64(m.WindowsFlushed.WithLabelValues(metrics.FlushedPublished)) == 1
	})
	if addr, err := sentinel.Client().Do(ctx, "SENTINEL", "get-master-addr-by-name", "m").StringSlice(); err != nil ||
		len(addr) != 2 || addr[0]+":"+addr[1] != replica.Addr {
		t.Fatalf("the Sentinel names %v (%v) as the master, want the replica %s", addr, err, replica.Addr)
	}
	t.Logf("pushed by the new master %v after the pause", time.Since(paused))
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

// holdFirstFlush holds the first pipeline that runs the flush script until
// the test has paused the master: it says so on flushing, then waits for
// paused (or the flush's own deadline) before sending.
type holdFirstFlush struct {
	sha      string
	seen     atomic.Bool
	flushing chan struct{}
	paused   chan struct{}
}

func (h *holdFirstFlush) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *holdFirstFlush) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h *holdFirstFlush) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if args := cmds[0].Args(); len(args) > 1 && cmds[0].Name() == "evalsha" && args[1] == h.sha &&
			h.seen.CompareAndSwap(false, true) {
			close(h.flushing)
			select {
			case <-h.paused:
			case <-ctx.Done():
			}
		}
		return next(ctx, cmds)
	}
}

// flushScriptHash is the SHA1 the worker's flushes are sent under (EVALSHA).
func flushScriptHash(t *testing.T) string {
	t.Helper()
	lua, err := os.ReadFile("../repo/flush.lua")
	if err != nil {
		t.Fatal(err)
	}
	return redis.NewScript(string(lua)).Hash()
}

// warmPipelinePool leaves n connections open in rdb's pipeline pool. The
// flush must find one idle when the master is paused: one it dialled then
// would wait in its handshake on the paused master, and go-redis, once the
// switch closed it, would dial the new master and send the flush there, as
// if the switch had come first. Housekeeping's sampling pipeline may hold
// one connection at that moment, waiting on the paused master too.
func warmPipelinePool(t *testing.T, rdb *redis.Client, n int) {
	t.Helper()
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() { // each pipeline holds its connection for 100 ms
			_, _ = rdb.Pipelined(context.Background(), func(p redis.Pipeliner) error {
				p.Do(context.Background(), "BLPOP", "warm:nothing", "0.1") // BLPop rounds up to 1 s
				return nil
			})
		})
	}
	wg.Wait()
	if st := rdb.PoolStats().PipelineStats; st == nil || st.IdleConns < uint32(n) {
		t.Fatalf("pipeline pool: %+v, want %d idle connections", st, n)
	}
}
