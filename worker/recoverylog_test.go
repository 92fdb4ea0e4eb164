package worker_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/combo-service/combo-service/internal/testredis"
	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/metrics"
	"github.com/combo-service/combo-service/push"
	"github.com/combo-service/combo-service/repo"
	"github.com/combo-service/combo-service/worker"
)

// The worker's failure lines stop when Redis comes back; without a line
// of its own, an outage that ended reads like a replica that stopped
// logging. Redis down and started again: each shard's reads fail, then one
// line says reading recovered, after how many failures, and what the last
// one was.
func TestWorkerLogsRecoveryOfItsReadsOnce(t *testing.T) {
	srv := testredis.Start(t, testredis.Options{})
	const shards = 3
	r, sub := prepare(t, srv.Client(), w, shards)
	core, logs := observer.New(zapcore.InfoLevel)
	m := metrics.New(prometheus.NewRegistry())
	wk := worker.New(r, worker.Config{Consumer: "a", Shards: shards, ClaimIdle: time.Hour, Block: 50 * time.Millisecond, OpTimeout: 200 * time.Millisecond},
		zap.New(core), m)
	wk.Start()
	defer func() { // Redis may be down: the final read's retries end at the deadline
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		wk.Shutdown(ctx)
	}()
	// Windows on every shard, each pushed: every shard's reader reads.
	keys, covered := repo.NewKeys(shards), map[int]bool{}
	for i := range int64(30) {
		covered[keys.Shard(100+i, 1, "x")] = true
	}
	if len(covered) != shards {
		t.Fatalf("the reports cover shards %v of %d", covered, shards)
	}
	ctx := context.Background()
	reportEveryShard := func(id int64) {
		t.Helper()
		for i := range int64(30) {
			if _, err := r.Report(ctx, []*combo.Contribution{contribution(id+i, 100+i)}); err != nil {
				t.Fatal(err)
			}
		}
		waitPushes(t, sub, 30)
	}
	reportEveryShard(1)

	reads := func() int { return logs.FilterMessage("redis read failed; retrying").Len() }
	srv.Kill()
	waitFor(t, "every shard's read failed", func() bool {
		failed := map[any]bool{}
		for _, e := range logs.FilterMessage("redis read failed; retrying").All() {
			failed[e.ContextMap()["shard"]] = true
		}
		return len(failed) == shards
	})
	srv.Start() // empty: each shard's group is made again, and read
	sub = srv.Client().PSubscribe(ctx, push.ChannelPattern)
	t.Cleanup(func() { sub.Close() })
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the reads' recovery logged", func() bool { return logs.FilterMessage("redis read recovered").Len() > 0 })
	failures := reads()
	// Every shard's reader has read since, and any second recovery line
	// has been written.
	reportEveryShard(1000)
	got := logs.FilterMessage("redis read recovered").All()
	if len(got) != 1 {
		t.Fatalf("%d recovery lines for one outage, want 1", len(got))
	}
	f := got[0].ContextMap()
	if n, _ := f["failures"].(int64); n < shards || int(n) > failures {
		t.Errorf("recovery line counts %v failures; %d failure lines were written before it, one per shard at least", f["failures"], failures)
	}
	if f["last_error"] == nil || f["last_error"] == "" {
		t.Errorf("recovery line has no last error: %v", f)
	}
	if d, _ := f["failing_for"].(time.Duration); d <= 0 {
		t.Errorf("recovery line's failing_for %v, want > 0", f["failing_for"])
	}
	if n := reads(); n != failures {
		t.Errorf("%d read failures logged after the recovery", n-failures)
	}
}

// refusingActivity answers the flush of every window of one activity with
// an error, as Redis does for a channel the ACL user may not publish on,
// until allowed; the others' flushes go through.
type refusingActivity struct {
	*repo.Repo
	activity int64
	allowed  atomic.Bool
}

func (s *refusingActivity) Flush(ctx context.Context, ws []repo.Window) ([]repo.FlushResult, error) {
	res, err := s.Repo.Flush(ctx, ws)
	if err != nil || s.allowed.Load() {
		return res, err
	}
	for i, win := range ws {
		if win.ActivityID == s.activity {
			res[i] = repo.FlushResult{Err: errors.New("NOPERM User combo has no permissions to access the 'act:66:contributions' channel")}
		}
	}
	return res, nil
}

// A window Redis refuses alone keeps flush_script failing while the
// shard's other windows go through: a recovery line at each of theirs
// would say all was well between each of its failures. One line, once it
// is flushed.
func TestFlushScriptRecoveryWaitsForTheWindowRefused(t *testing.T) {
	r, _, sub, _ := setup(t)
	store := &refusingActivity{Repo: r, activity: 66}
	core, logs := observer.New(zapcore.InfoLevel)
	wk := worker.New(store, worker.Config{Consumer: "c1", ClaimIdle: time.Hour, Block: 50 * time.Millisecond},
		zap.New(core), metrics.New(prometheus.NewRegistry()))
	wk.Start()
	defer func() { // the refused window, held, would hold the drain
		store.allowed.Store(true)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		wk.Shutdown(ctx)
	}()
	ctx := context.Background()
	if _, err := r.Report(ctx, []*combo.Contribution{contribution(1, 66)}); err != nil {
		t.Fatal(err)
	}
	failures := func() int { return logs.FilterMessage("redis flush_script failed; retrying").Len() }
	waitFor(t, "the refused window's flush failed", func() bool { return failures() > 0 })
	for i := range int64(5) {
		if _, err := r.Report(ctx, []*combo.Contribution{contribution(10+i, 10+i)}); err != nil {
			t.Fatal(err)
		}
	}
	waitPushes(t, sub, 5)
	before := failures()
	waitFor(t, "the refused window's flush failed again after the others were pushed", func() bool { return failures() > before })
	if n := logs.FilterMessage("redis flush_script recovered").Len(); n != 0 {
		t.Fatalf("%d recovery lines while a window was still refused", n)
	}
	if w := logs.FilterMessage("redis flush_script failed; retrying").All()[0].ContextMap()["entry"]; w == nil || w == "" {
		t.Errorf("the failure line does not name the window refused")
	}
	store.allowed.Store(true)
	waitPushes(t, sub, 1)
	waitFor(t, "the recovery logged", func() bool { return logs.FilterMessage("redis flush_script recovered").Len() > 0 })
	got := logs.FilterMessage("redis flush_script recovered").All()
	if len(got) != 1 {
		t.Fatalf("%d recovery lines, want 1", len(got))
	}
	if n := got[0].ContextMap()["failures"]; n != int64(failures()) {
		t.Errorf("recovery line counts %v failures, %d were logged", n, failures())
	}
}
