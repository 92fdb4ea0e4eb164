package worker_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/repo"
	"github.com/combo-service/combo-service/worker"
)

// stalledFinalRead wraps the real store. While blind, the readers' BLOCK
// reads see nothing, as if their replies had not come back before the
// stop; then the first fail reads without BLOCK (Shutdown's final read)
// fail, as against a Redis stalled during a deploy.
type stalledFinalRead struct {
	*repo.Repo
	blind    atomic.Bool
	inFlight atomic.Int32 // real BLOCK reads under way
	fail     atomic.Int32
}

func (s *stalledFinalRead) Read(ctx context.Context, shard int, consumer, start string, count int, block time.Duration) ([]repo.Window, []string, error) {
	if block >= 0 {
		if s.blind.Load() {
			<-ctx.Done()
			return nil, nil, nil
		}
		s.inFlight.Add(1)
		defer s.inFlight.Add(-1)
	} else if s.fail.Add(-1) >= 0 {
		return nil, nil, errors.New("read tcp: i/o timeout (injected)")
	}
	return s.Repo.Read(ctx, shard, consumer, start, count, block)
}

// A final read that fails (Redis stalled) is retried within Shutdown's
// bound: the window of a report acknowledged just before the stop is read
// and published, not left for a replica that may not exist.
func TestShutdownRetriesAFailedFinalRead(t *testing.T) {
	r, _, sub, m := setup(t)
	ctx := context.Background()
	store := &stalledFinalRead{Repo: r}
	wk := worker.New(store, worker.Config{Consumer: "c1", ClaimIdle: time.Hour, Block: 50 * time.Millisecond},
		zaptest.NewLogger(t), m)
	wk.Start()
	store.blind.Store(true)
	for store.inFlight.Load() > 0 { // a read already under way could take the entry
		time.Sleep(time.Millisecond)
	}
	if _, err := r.Report(ctx, []*combo.Contribution{contribution(1, 9)}); err != nil {
		t.Fatal(err)
	}
	store.fail.Store(3)
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := wk.Shutdown(sctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if n := store.fail.Load(); n >= 0 {
		t.Fatalf("%d injected failures left: the final read was not retried past them", n)
	}
	select {
	case <-sub.Channel():
	case <-time.After(2 * time.Second):
		t.Fatal("the window of a report acknowledged before the stop was not published")
	}
}
