package worker_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/combo-service/combo-service/worker"
)

// A stop whose final read never succeeded (Redis frozen through the
// drain) must not log "final read done; publishing held windows": seen
// live, that info line came 15 s into the drain, with the bound already
// spent and the read given up, a second before "stopped with an error".
func TestShutdownDoesNotSayTheFinalReadIsDoneWhenItFailed(t *testing.T) {
	r, _, _, m := setup(t)
	store := &stalledFinalRead{Repo: r}
	store.dead.Store(1) // shard 0's final reads always fail
	core, logs := observer.New(zapcore.InfoLevel)
	wk := worker.New(store, worker.Config{Consumer: "c1", Shards: 1, ClaimIdle: time.Hour, Block: 50 * time.Millisecond},
		zap.New(core), m)
	wk.Start()
	store.blind.Store(true)
	waitFor(t, "the reads in flight to end", func() bool { return store.inFlight.Load() == 0 })
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := wk.Shutdown(ctx); err == nil || !strings.Contains(err.Error(), "final read of shard 0") {
		t.Fatalf("Shutdown: %v, want the failed final read named", err)
	}
	if said := logs.FilterMessage("final read done; publishing held windows").All(); len(said) != 0 {
		t.Fatalf("logged %q at %v although every final read failed and the bound had passed", said[0].Message, said[0].Level)
	}
}
