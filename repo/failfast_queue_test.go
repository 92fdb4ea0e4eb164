package repo_test

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"syscall"
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
	// A connection reset: a net.Error, but no timeout.
	reset := &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
	hook := &failFirstReportPipeline{err: reset, release: make(chan struct{})}
	rdb.AddHook(hook)
	first := make(chan error, 1)
	go func() {
		_, err := r.Report(ctx, []*combo.Contribution{contribution(1, "rose", base)})
		first <- err
	}()
	for deadline := time.Now().Add(5 * time.Second); !hook.held.Load(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no pipeline of report scripts held in 5 s")
		}
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
	select {
	case err := <-first:
		if !errors.Is(err, repo.ErrUnavailable) {
			t.Fatalf("the report whose pipeline failed: %v, want ErrUnavailable", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the report whose pipeline failed not answered in 5 s")
	}
	var a answer
	select {
	case a = <-queued:
	case <-time.After(5 * time.Second):
		t.Fatal("the queued report not answered in 5 s")
	}
	if a.err != nil || a.res[0].Outcome != repo.Opened {
		t.Fatalf("the report queued behind a pipeline that failed fast: %+v %v, want it sent and opened", a.res, a.err)
	}
}
