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

	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/metrics"
	"github.com/combo-service/combo-service/repo"
	"github.com/combo-service/combo-service/worker"
)

// refusedThenPanicking answers activity 66's window's first flush with an
// error (NOPERM) and panics at its next; activity 77's window's first
// flush is refused once. The others go through.
type refusedThenPanicking struct {
	*repo.Repo
	tries66 atomic.Int32
	fail77  atomic.Int32
}

func (s *refusedThenPanicking) Flush(ctx context.Context, ws []repo.Window) ([]repo.FlushResult, error) {
	res := make([]repo.FlushResult, len(ws))
	var pass []repo.Window
	var at []int
	for i, win := range ws {
		switch {
		case win.ActivityID == 66 && s.tries66.Add(1) > 1:
			panic("a window that panics its flush")
		case win.ActivityID == 66:
			res[i] = repo.FlushResult{Err: errors.New("NOPERM User combo has no permissions to access the 'act:66:contributions' channel")}
		case win.ActivityID == 77 && s.fail77.Add(-1) >= 0:
			res[i] = repo.FlushResult{Err: errors.New("NOPERM once")}
		default:
			pass = append(pass, win)
			at = append(at, i)
		}
	}
	if len(pass) > 0 {
		got, err := s.Repo.Flush(ctx, pass)
		if err != nil {
			return nil, err
		}
		for j, i := range at {
			res[i] = got[j]
		}
	}
	return res, nil
}

// A window whose flush failed and that then leaves the queue without a
// flush that answered (its flush panicked: forgotten, left pending for the
// claimer) stays in flush_script's run of failures for good: no later
// flush_script failure of this replica is ever said to have recovered.
func TestFlushScriptRecoveryAfterARefusedWindowPanicked(t *testing.T) {
	r, _, sub, _ := setup(t)
	store := &refusedThenPanicking{Repo: r}
	store.fail77.Store(1)
	core, logs := observer.New(zapcore.InfoLevel)
	wk := worker.New(store, worker.Config{Consumer: "c1", ClaimIdle: time.Hour, Block: 50 * time.Millisecond},
		zap.New(core), metrics.New(prometheus.NewRegistry()))
	wk.Start()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		wk.Shutdown(ctx)
	}()
	ctx := context.Background()
	if _, err := r.Report(ctx, []*combo.Contribution{contribution(1, 66)}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "66's flush panicked, its window forgotten", func() bool {
		return logs.FilterMessageSnippet("recovered panic flushing a window").Len() > 0
	})
	if _, err := r.Report(ctx, []*combo.Contribution{contribution(2, 77)}); err != nil {
		t.Fatal(err)
	}
	waitPushes(t, sub, 1) // 77's, after one refusal
	waitFor(t, "flush_script's recovery logged once 77's window went through", func() bool {
		return logs.FilterMessage("redis flush_script recovered").Len() > 0
	})
}

// slowFirstClock makes the housekeeper's first TIME (shard 0) slow and a
// flusher's first TIME of shard 1 fail after it: the estimate, shared by
// the shards of one Redis, is then known, and the flusher never reads the
// clock again.
type slowFirstClock struct {
	*repo.Repo
	calls [2]atomic.Int32
}

func (s *slowFirstClock) Time(ctx context.Context, shard int) (time.Time, error) {
	switch n := s.calls[shard].Add(1); {
	case n == 1 && shard == 0:
		time.Sleep(200 * time.Millisecond)
	case n == 1 && shard == 1:
		time.Sleep(500 * time.Millisecond)
		return time.Time{}, errors.New("i/o timeout")
	}
	return s.Repo.Time(ctx, shard)
}

// On one Redis the housekeeper reads the clock as shard 0's, every round;
// a flusher reads it (as its own shard's) only before the first reading.
// A flusher's failed reading thus stays in op time's run for good though
// every later TIME succeeds: "redis time recovered" is never written.
func TestTimeRecoveryAfterAFlushersFailedReading(t *testing.T) {
	r, _, sub, _ := setupShards(t, 2)
	store := &slowFirstClock{Repo: r}
	keys := r.Keys()
	activity := int64(1)
	for keys.Shard(activity, 1, "x") != 1 {
		activity++
	}
	ctx := context.Background()
	if _, err := r.Report(ctx, []*combo.Contribution{contribution(1, activity)}); err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zapcore.InfoLevel)
	wk := worker.New(store, worker.Config{Consumer: "c1", Shards: 2, ClaimIdle: time.Hour, Block: 50 * time.Millisecond,
		SampleEvery: 100 * time.Millisecond}, zap.New(core), metrics.New(prometheus.NewRegistry()))
	wk.Start()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		wk.Shutdown(ctx)
	}()
	waitFor(t, "the flusher's reading failed", func() bool { return logs.FilterMessage("redis time failed; retrying").Len() > 0 })
	waitPushes(t, sub, 1)
	waitFor(t, "time's recovery logged (the housekeeper reads it every 100 ms)", func() bool {
		return logs.FilterMessage("redis time recovered").Len() > 0
	})
}
