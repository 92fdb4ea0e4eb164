package worker_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/combo-service/combo-service/internal/testredis"
	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/metrics"
	"github.com/combo-service/combo-service/push"
	"github.com/combo-service/combo-service/repo"
	"github.com/combo-service/combo-service/worker"
)

// A Redis restarted without persistence after an outage long enough to
// back the reader off to its cap (2 s) has no group: the reader's first
// read finds it missing and creates it again. The group is there now, so
// the next read goes at once: waiting out the outage's backoff first held
// every window opened meanwhile up to 2 s past its due time.
func TestReadAfterTheGroupIsRecreatedIsNotBackedOff(t *testing.T) {
	srv := testredis.Start(t, testredis.Options{})
	r, sub := prepare(t, srv.Client(), w, 1)
	m := metrics.New(prometheus.NewRegistry())
	wk := worker.New(r, worker.Config{Consumer: "a", ClaimIdle: time.Hour, Block: 50 * time.Millisecond, OpTimeout: 300 * time.Millisecond},
		zaptest.NewLogger(t), m)
	wk.Start()
	defer stop(t, wk)
	ctx := context.Background()
	if _, err := r.Report(ctx, []*combo.Contribution{contribution(1, 7)}); err != nil {
		t.Fatal(err)
	}
	waitPushes(t, sub, 1) // reading

	srv.Kill()
	// 50 ms doubling: after 6 failed reads the next wait is 1-2 s.
	reads := m.RedisErrors.WithLabelValues(metrics.OpRead)
	waitFor(t, "the reader backed off to its cap", func() bool { return testutil.ToFloat64(reads) >= 7 })
	srv.Start() // no persistence: empty, no group
	waitFor(t, "the lost group counted", func() bool { return testutil.ToFloat64(m.GroupsRecreated) >= 1 })

	// A subscriber of the restarted Redis.
	sub = srv.Client().PSubscribe(ctx, push.ChannelPattern)
	t.Cleanup(func() { sub.Close() })
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := r.Report(ctx, []*combo.Contribution{contribution(2, 8)}); err != nil {
		t.Fatal(err)
	}
	waitPushes(t, sub, 1)
	// Due W + grace (170 ms) after the report.
	d := time.Since(start)
	t.Logf("pushed %s after its report", d)
	if d > 600*time.Millisecond {
		t.Fatalf("a window opened after the group was recreated was pushed %s after its report, want < 600ms (W + grace is 170ms; the outage's backoff was not reset)", d)
	}
}

// recreateRace holds every XGROUP CREATE, once armed, until two have come
// (the reader's and the claimer's, both having found the group missing),
// then notes each loop's next command: by then each has counted what it
// found.
type recreateRace struct {
	armed                   atomic.Bool
	creates                 atomic.Int32
	both                    chan struct{}
	readAfter, claimedAfter atomic.Bool
}

func (h *recreateRace) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *recreateRace) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *recreateRace) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !h.armed.Load() {
			return next(ctx, cmd)
		}
		args := cmd.Args()
		switch name := cmd.Name(); {
		case name == "xgroup" && len(args) > 1 && strings.EqualFold(args[1].(string), "create"):
			if h.creates.Add(1) == 2 {
				close(h.both)
			}
			select {
			case <-h.both:
			case <-time.After(5 * time.Second):
			}
		case name == "xreadgroup" && h.creates.Load() >= 2:
			h.readAfter.Store(true)
		case name == "xautoclaim" && h.creates.Load() >= 2:
			h.claimedAfter.Store(true)
		}
		return next(ctx, cmd)
	}
}

// The reader and the claimer of one replica can both find the group
// missing after one loss: it is one loss, counted once.
func TestGroupLossSeenByReaderAndClaimerIsCountedOnce(t *testing.T) {
	srv := testredis.Start(t, testredis.Options{})
	rdb := srv.Client()
	wc := srv.Client() // the worker's, watched
	h := &recreateRace{both: make(chan struct{})}
	wc.AddHook(h)
	r, sub := prepare(t, wc, w, 1)
	m := metrics.New(prometheus.NewRegistry())
	wk := worker.New(r, worker.Config{Consumer: "a", ClaimIdle: 200 * time.Millisecond, Block: time.Second}, zaptest.NewLogger(t), m)
	wk.Start()
	defer stop(t, wk)
	ctx := context.Background()
	if _, err := r.Report(ctx, []*combo.Contribution{contribution(1, 7)}); err != nil {
		t.Fatal(err)
	}
	waitPushes(t, sub, 1) // prepared and reading

	h.armed.Store(true)
	if err := rdb.XGroupDestroy(ctx, r.Keys().Stream(0), repo.Group).Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "both loops recreating the group", func() bool { return h.creates.Load() >= 2 })
	waitFor(t, "both loops going on", func() bool { return h.readAfter.Load() && h.claimedAfter.Load() })
	if n := testutil.ToFloat64(m.GroupsRecreated); n != 1 {
		t.Fatalf("groups recreated %v, want 1 (one loss, seen by the reader and the claimer)", n)
	}
}

// FLUSHALL or DEL of the stream answers a read blocked on it with
// "UNBLOCKED the stream key no longer exists": the group is gone with the
// stream. That is the loss itself, counted once as the group missing, not
// also as a failed read (a warning and combo_redis_errors_total{op="read"}
// for what is no fault of Redis's).
func TestWipeUnderABlockedReadIsOnlyAGroupLoss(t *testing.T) {
	for _, wipe := range []string{"FLUSHALL", "DEL"} {
		t.Run(wipe, func(t *testing.T) {
			r, rdb, _, m := setup(t)
			ctx := context.Background()
			core, logs := observer.New(zapcore.InfoLevel)
			wk := worker.New(r, worker.Config{Consumer: "a", ClaimIdle: time.Hour, Block: 2 * time.Second}, zap.New(core), m)
			wk.Start()
			defer stop(t, wk)
			waitFor(t, "the reader blocked", func() bool { return readerBlocked(ctx, rdb) })
			var err error
			if wipe == "FLUSHALL" {
				err = rdb.FlushAll(ctx).Err()
			} else {
				err = rdb.Del(ctx, r.Keys().Stream(0)).Err()
			}
			if err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the lost group counted", func() bool { return testutil.ToFloat64(m.GroupsRecreated) >= 1 })
			// Reading goes on.
			if _, err := r.Report(ctx, []*combo.Contribution{contribution(2, 8)}); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the new window read", func() bool { return wk.Held() == 1 })
			if n := testutil.ToFloat64(m.RedisErrors.WithLabelValues(metrics.OpRead)); n != 0 {
				t.Errorf("redis read errors %v, want 0 (the wipe is counted as the group lost)", n)
			}
			for _, e := range logs.FilterMessageSnippet("failed").All() {
				t.Errorf("logged %q: %v", e.Message, e.ContextMap()["error"])
			}
			if n := testutil.ToFloat64(m.GroupsRecreated); n != 1 {
				t.Errorf("groups recreated %v, want 1", n)
			}
		})
	}
}

// A replica starting on a wiped Redis takes the missing group for a new
// Redis's and creates it, counting nothing. A running replica whose read
// was blocked on the stream when it was wiped is told so by Redis at once
// (UNBLOCKED), so it counts the loss even when the group is back before it
// reads again: here created right behind the FLUSHALL, as a replica
// starting that instant would.
func TestWipeUnderABlockedReadIsCountedThoughTheGroupIsBackFirst(t *testing.T) {
	r, rdb, sub, m := setup(t)
	ctx := context.Background()
	wk := worker.New(r, worker.Config{Consumer: "a", ClaimIdle: time.Hour, Block: 2 * time.Second}, zaptest.NewLogger(t), m)
	wk.Start()
	defer stop(t, wk)
	waitFor(t, "the reader blocked", func() bool { return readerBlocked(ctx, rdb) })
	if _, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.FlushAll(ctx)
		p.XGroupCreateMkStream(ctx, r.Keys().Stream(0), repo.Group, "0") // another replica's start
		return nil
	}); err != nil && !redis.HasErrorPrefix(err, "BUSYGROUP") {
		// BUSYGROUP: the reader made the group again first. Since Redis
		// 7.2 a read blocked on a deleted key is run again at once (NOGROUP)
		// rather than answered UNBLOCKED, and it can win the race.
		t.Fatal(err)
	}
	// The reader goes on: once a window opened now is pushed, it has
	// handled the wipe.
	if _, err := r.Report(ctx, []*combo.Contribution{contribution(2, 8)}); err != nil {
		t.Fatal(err)
	}
	waitPushes(t, sub, 1)
	if n := testutil.ToFloat64(m.GroupsRecreated); n != 1 {
		t.Fatalf("groups recreated %v, want 1 (the wipe went uncounted)", n)
	}
}

// readerBlocked reports whether a client of rdb's server is blocked in
// XREADGROUP.
func readerBlocked(ctx context.Context, rdb *redis.Client) bool {
	list, err := rdb.ClientList(ctx).Result()
	if err != nil {
		return false
	}
	for c := range strings.SplitSeq(list, "\n") {
		if strings.Contains(c, "cmd=xreadgroup") && strings.Contains(c, "flags=b") {
			return true
		}
	}
	return false
}
