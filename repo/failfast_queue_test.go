package repo_test

import (
	"context"
	"errors"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/combo-service/combo-service/internal/testredis"
	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/repo"
)

// failFirstReportPipeline fails the first pipeline of report scripts with
// err, at once, once release is closed; the rest go to Redis.
type failFirstReportPipeline struct {
	err     error
	held    atomic.Bool
	release chan struct{}
}

func (h *failFirstReportPipeline) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *failFirstReportPipeline) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return next
}

func (h *failFirstReportPipeline) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if n := cmds[0].Name(); (n == "evalsha" || n == "eval") && h.held.CompareAndSwap(false, true) {
			<-h.release
			for _, c := range cmds {
				c.SetErr(h.err)
			}
			return h.err
		}
		return next(ctx, cmds)
	}
}

// A shared pipeline that fails fast (a connection reset, not a silence
// of redis.timeout) leaves the calls queued behind it to the next
// pipeline: they are sent, and counted. Failing them with it, as for a
// pipeline Redis never answered, made a blip fail every queued caller
// UNAVAILABLE though Redis answered them at once.
func TestCallsQueuedBehindAPipelineThatFailedFastAreSent(t *testing.T) {
	rdb := testredis.Start(t, testredis.Options{}).Client()
	r := repo.New(rdb, settings())
	ctx := context.Background()
	if err := r.LoadScripts(ctx); err != nil {
		t.Fatal(err)
	}
	hook := &failFirstReportPipeline{err: io.ErrUnexpectedEOF, release: make(chan struct{})}
	rdb.AddHook(hook)
	first := make(chan error, 1)
	go func() {
		_, err := r.Report(ctx, []*combo.Contribution{contribution(1, "rose", base)})
		first <- err
	}()
	for !hook.held.Load() {
		time.Sleep(time.Millisecond)
	}
	type answer struct {
		res []repo.ReportResult
		err error
	}
	queued := make(chan answer, 1)
	go func() {
		res, err := r.Report(ctx, []*combo.Contribution{contribution(2, "lily", base)})
		queued <- answer{res, err}
	}()
	waitPending(t, r, 1)
	close(hook.release)
	if err := <-first; !errors.Is(err, repo.ErrUnavailable) {
		t.Fatalf("the report whose pipeline failed: %v, want ErrUnavailable", err)
	}
	a := <-queued
	if a.err != nil || a.res[0].Outcome != repo.Opened {
		t.Fatalf("the report queued behind a pipeline that failed fast: %+v %v, want it sent and opened", a.res, a.err)
	}
}
