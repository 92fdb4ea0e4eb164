package worker

import (
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/combo-service/combo-service/metrics"
)

// An op's run of failures ends when every shard it failed on has
// succeeded since, not at the first success on any shard: a Cluster
// master down holds its shards' reads failing while the others' succeed.
func TestFailingOpsRunEndsWhenEveryFailedShardSucceeded(t *testing.T) {
	var f failingOps
	t0 := time.Now()
	succeeded := func(op string, where any) (run failRun, ended bool) {
		f.succeeded(op, where, time.Now(), func(_ string, r failRun) bool { run, ended = r, true; return true })
		return run, ended
	}
	if _, ended := succeeded("read", 0); ended {
		t.Fatal("a success with no failure before it ended a run")
	}
	errA, errB := errors.New("a"), errors.New("b")
	f.failed("read", 0, errA, t0)
	f.failed("read", 2, errA, t0.Add(time.Second))
	f.failed("read", 2, errB, t0.Add(2*time.Second))
	f.failed("flush", 1, errA, t0)
	for _, step := range []struct {
		op    string
		shard int
		ended bool
	}{
		{"read", 1, false},  // never failed there
		{"read", 0, false},  // shard 2 still failing
		{"flush", 0, false}, // flush failed on shard 1
		{"read", 2, true},
		{"read", 2, false}, // ended already
		{"flush", 1, true},
	} {
		run, ended := succeeded(step.op, step.shard)
		if ended != step.ended {
			t.Fatalf("%s succeeded on shard %d: ended %v, want %v", step.op, step.shard, ended, step.ended)
		}
		if ended && step.op == "read" {
			if run.failures != 3 || !run.since.Equal(t0) || run.lastErr != errB {
				t.Errorf("read's run: %d failures since %v, last %v; want 3 since %v, last %v",
					run.failures, run.since, run.lastErr, t0, errB)
			}
		}
	}
	if n := f.open.Load(); n != 0 || len(f.runs) != 0 {
		t.Errorf("%d runs open (%v) after every op recovered", n, f.runs)
	}
}

// A recovery is logged once per run, with its count of failures and the
// last error, under a message of its own per op (the log is sampled by
// message); a success with no failure before it logs nothing.
func TestRedisOKLogsTheEndOfARunOnce(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	w := &Worker{log: zap.New(core), metrics: metrics.New(prometheus.NewRegistry())}
	w.redisOK(metrics.OpRead, 0)
	if n := logs.Len(); n != 0 {
		t.Fatalf("%d lines for a success with no failure before it", n)
	}
	for shard := range 3 {
		w.redisError(metrics.OpRead, shard, errors.New("i/o timeout"))
		w.redisError(metrics.OpRead, shard, errors.New("connection refused"))
	}
	for shard := range 3 {
		w.redisOK(metrics.OpRead, shard)
		w.redisOK(metrics.OpRead, shard)
	}
	got := logs.FilterMessage("redis read recovered").All()
	if len(got) != 1 {
		t.Fatalf("%d recovery lines, want 1 (all: %v)", len(got), logs.All())
	}
	f := got[0].ContextMap()
	if f["failures"] != int64(6) || f["last_error"] != "connection refused" || f["op"] != metrics.OpRead {
		t.Errorf("recovery line's fields %v, want 6 failures, last error \"connection refused\", op read", f)
	}
	if _, ok := f["failing_for"].(time.Duration); !ok {
		t.Errorf("recovery line has no failing_for duration: %v", f)
	}
	if l := got[0].Level; l != zapcore.InfoLevel {
		t.Errorf("recovery line at %v, want info", l)
	}
}

// A recovery line the sampler thins away (the op failed and recovered
// again within its second) is written by the housekeeper's next round
// (writeHeld), not tried again at each of the op's next successes: those
// come every few ms, and each refused line counted as one left out. Its
// failing_for ends when the run did, not when the line is written.
func TestRecoveryLineThinnedAwayIsWrittenLater(t *testing.T) {
	var f failingOps
	t0 := time.Now()
	f.failed("read", 0, errors.New("a"), t0)
	tries := 0
	var got failRun
	write := func(_ string, r failRun) bool { tries++; got = r; return tries > 1 } // the first is thinned away
	f.succeeded("read", 0, t0.Add(time.Second), write)
	if tries != 1 || f.open.Load() != 1 {
		t.Fatalf("after a thinned-away line: %d tries, %d runs open; want 1, 1", tries, f.open.Load())
	}
	f.succeeded("read", 0, t0.Add(2*time.Second), write)
	f.succeeded("read", 3, t0.Add(3*time.Second), write)
	if tries != 1 {
		t.Fatalf("the op's next successes tried the held line again: %d tries, want 1", tries)
	}
	f.writeHeld(write)
	if tries != 2 || f.open.Load() != 0 || len(f.runs) != 0 {
		t.Fatalf("after writeHeld: %d tries, %d runs open; want 2, 0", tries, f.open.Load())
	}
	if d := got.endedAt.Sub(got.since); d != time.Second {
		t.Errorf("the held line's run lasted %s, want 1s (from its failure to the success that ended it)", d)
	}
	f.writeHeld(write)
	if tries != 2 {
		t.Fatalf("writeHeld with nothing held tried a line: %d tries", tries)
	}
	// Failing again before its line was written continues the run.
	never := func(string, failRun) bool { return false }
	f.failed("read", 0, errors.New("a"), time.Now())
	f.succeeded("read", 0, time.Now(), never)
	f.failed("read", 1, errors.New("b"), time.Now())
	got = failRun{}
	f.writeHeld(func(_ string, r failRun) bool { got = r; return true })
	if got.failures != 0 {
		t.Fatalf("writeHeld wrote the line of a run failing again on shard 1")
	}
	f.succeeded("read", 0, time.Now(), func(_ string, r failRun) bool { got = r; return true })
	if got.failures != 0 {
		t.Fatalf("a run that failed again on shard 1 ended at shard 0's success")
	}
	f.succeeded("read", 1, time.Now(), func(_ string, r failRun) bool { got = r; return true })
	if got.failures != 2 || got.lastErr.Error() != "b" {
		t.Fatalf("the run's line: %d failures, last %v; want 2, b", got.failures, got.lastErr)
	}
}
