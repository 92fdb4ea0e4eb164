package worker_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/combo-service/combo-service/internal/testredis"
	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/metrics"
	"github.com/combo-service/combo-service/repo"
	"github.com/combo-service/combo-service/worker"
)

// refusedFlushes signals each flush of a window of activity 666.
type refusedFlushes struct {
	*repo.Repo
	n   atomic.Int64
	sig chan struct{}
}

func (s *refusedFlushes) Flush(ctx context.Context, ws []repo.Window) ([]repo.FlushResult, error) {
	res, err := s.Repo.Flush(ctx, ws)
	for _, win := range ws {
		if win.ActivityID == 666 {
			s.n.Add(1)
			select {
			case s.sig <- struct{}{}:
			default:
			}
			break
		}
	}
	return res, err
}

// One window Redis keeps refusing (its ACL user may not PUBLISH on that
// activity's channel: the flush script fails NOPERM for it alone) waits
// its own growing delays, and holds up no other window of its shard. The
// flusher once backed off whenever a batch failed whole, as that window's
// batches of one did, and a healthy window falling due meanwhile waited
// out the back-off: pushed about a second late after six refusals.
func TestARefusedWindowDelaysNoOther(t *testing.T) {
	srv := testredis.Start(t, testredis.Options{})
	admin := srv.Client()
	ctx := context.Background()
	r, sub := prepare(t, admin, w, 1) // reports go through the admin user
	if err := admin.Do(ctx, "ACL", "SETUSER", "combo", "on", ">pw", "~combo:*", "&act:5:*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	limited := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: "combo", Password: "pw"})
	t.Cleanup(func() { limited.Close() })
	store := &refusedFlushes{Repo: repo.New(limited, repo.Settings{Window: w, Grace: 20 * time.Millisecond,
		Dedupe: time.Minute, Stale: time.Minute, Timeout: time.Second, Shards: 1, StreamMaxLen: 100000}),
		sig: make(chan struct{}, 1)}
	wk := worker.New(store, worker.Config{Consumer: "c1", ClaimIdle: time.Hour, Block: 50 * time.Millisecond, SampleEvery: time.Hour},
		zap.NewNop(), metrics.New(prometheus.NewRegistry()))
	wk.Start()
	defer func() {
		sctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		_ = wk.Shutdown(sctx)
	}()
	if _, err := r.Report(ctx, []*combo.Contribution{contribution(1, 666)}); err != nil {
		t.Fatal(err)
	}
	for store.n.Load() < 6 { // the old back-off is then 0.8-1.6 s
		select {
		case <-store.sig:
		case <-time.After(15 * time.Second):
			t.Fatalf("only %d refused flushes", store.n.Load())
		}
	}
	start := time.Now()
	if _, err := r.Report(ctx, []*combo.Contribution{contribution(10, 5)}); err != nil {
		t.Fatal(err)
	}
	msg, err := sub.ReceiveMessage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	due := w + 20*time.Millisecond
	if took := time.Since(start); msg.Channel != "act:5:contributions" || took > due+500*time.Millisecond {
		t.Fatalf("healthy window pushed on %s %s after its report, due after %s: held up by another window's refusals",
			msg.Channel, took.Round(time.Millisecond), due)
	}
}
