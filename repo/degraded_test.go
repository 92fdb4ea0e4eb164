package repo_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/repo"
)

// holdFirstReportPipeline adds a hook to rdb that holds the first pipeline
// of report scripts until release is closed; held says it is being held.
func holdFirstReportPipeline(rdb *redis.Client) (held *atomic.Bool, release chan struct{}) {
	held, release = &atomic.Bool{}, make(chan struct{})
	rdb.AddHook(pipelineHook{cmds: func(cmds []redis.Cmder) {
		if n := cmds[0].Name(); (n == "evalsha" || n == "eval") && !repo.IsDegradedPublish(cmds[0]) && held.CompareAndSwap(false, true) {
			<-release
		}
	}})
	return held, release
}

// The error of a call whose degraded publish failed names why its own
// reports degraded, not another call's in the same shared pipeline: it
// named the last cause of the whole pipeline, so a call degraded by a full
// stream could be told its report hit a key of the wrong type.
func TestFailedDegradedPublishNamesTheCallsOwnCause(t *testing.T) {
	ctx := context.Background()
	admin, user := userDeniedChannels(t) // every degraded publish fails: NOPERM
	s := settings()
	s.StreamMaxLen = 1
	r := repo.New(user, s)
	if err := r.LoadScripts(ctx); err != nil {
		t.Fatal(err)
	}
	if res, err := r.Report(ctx, []*combo.Contribution{contribution(1, "rose", base)}); err != nil || res[0].Outcome != repo.Opened {
		t.Fatalf("filling the stream: %+v %v", res, err)
	}
	// tulip's window key holds a hash: its report fails WRONGTYPE.
	if err := admin.HSet(ctx, r.Keys().Current(0, 7, 42, "tulip"), "x", "y").Err(); err != nil {
		t.Fatal(err)
	}
	held, release := holdFirstReportPipeline(user)
	first := make(chan error, 1)
	go func() {
		_, err := r.Report(ctx, []*combo.Contribution{contribution(2, "rose", base+1)}) // joins
		first <- err
	}()
	for !held.Load() {
		time.Sleep(time.Millisecond)
	}
	// Both queued behind it, so the next pipeline carries both.
	full, wrong := make(chan error, 1), make(chan error, 1)
	go func() {
		_, err := r.Report(ctx, []*combo.Contribution{contribution(3, "lily", base)}) // a new window: the stream is full
		full <- err
	}()
	go func() {
		_, err := r.Report(ctx, []*combo.Contribution{contribution(4, "tulip", base)})
		wrong <- err
	}()
	waitPending(t, r, 2)
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name       string
		err        error
		own, other string
	}{
		{"report degraded by a full stream", <-full, "STREAMFULL", "WRONGTYPE"},
		{"report degraded by a key of the wrong type", <-wrong, "WRONGTYPE", "STREAMFULL"},
	} {
		if c.err == nil || !strings.Contains(c.err.Error(), "degraded publish failed") ||
			!strings.Contains(c.err.Error(), c.own) || strings.Contains(c.err.Error(), c.other) {
			t.Errorf("%s, its publish refused: %v, want the publish's failure naming %s, not %s", c.name, c.err, c.own, c.other)
		}
	}
}
