package handler

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/combo-service/combo-service/internal/stacks"
	"github.com/combo-service/combo-service/internal/testredis"
	"github.com/combo-service/combo-service/internal/testwait"
	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/metrics"
	"github.com/combo-service/combo-service/repo"
)

// realRepo is a repo on a real redis-server, with redis.stream_maxlen
// maxLen, as user "combo", whose ACL rules are channels ("&*": may PUBLISH
// on every channel; "resetchannels": on none, as Redis 7 makes a new user
// unless told, so every degraded publish fails). It returns the admin
// client too.
func realRepo(t *testing.T, maxLen int64, channels string, hooks ...redis.Hook) (*repo.Repo, *redis.Client) {
	t.Helper()
	ctx := context.Background()
	srv := testredis.Start(t, testredis.Options{})
	admin := srv.Client()
	t.Cleanup(func() { admin.Close() })
	if err := admin.Do(ctx, "ACL", "SETUSER", "combo", "on", ">pw", "~*", channels, "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: "combo", Password: "pw", MaxRetries: -1,
		ContextTimeoutEnabled: true, ReadTimeout: time.Minute, WriteTimeout: time.Minute})
	t.Cleanup(func() { rdb.Close() })
	r := repo.New(rdb, repo.Settings{Window: 200 * time.Millisecond, Grace: 50 * time.Millisecond, Dedupe: 10 * time.Second,
		Stale: 10 * time.Second, Timeout: time.Second, Shards: 1, StreamMaxLen: maxLen})
	if err := r.LoadScripts(ctx); err != nil {
		t.Fatal(err)
	}
	for _, h := range hooks {
		rdb.AddHook(h)
	}
	return r, admin
}

func gift(id int64, itemType string) *combo.Contribution {
	return &combo.Contribution{Id: id, ActivityId: 7, UserId: 42, ItemId: 3, ItemType: itemType, Quantity: 1,
		CreatedAt: time.Now().UnixMilli()}
}

// A batch whose degraded publish fails is answered with an error, but the
// windows its other reports opened exist and will be pushed: they are
// counted in combo_windows_opened_total all the same. Before, the whole
// call was counted as failed and those windows never were.
func TestWindowsOpenedByABatchWhoseDegradedPublishFailsAreCounted(t *testing.T) {
	r, admin := realRepo(t, 1, "resetchannels") // the stream takes one window
	m := metrics.New(prometheus.NewRegistry())
	h := New(r, 200*time.Millisecond, m, zap.NewNop())
	// rose opens the one window the stream takes; lily finds it full and
	// degrades; its publish is refused (NOPERM): the call fails INTERNAL.
	_, err := h.ReportContributions(context.Background(), &combo.ReportContributionsRequest{
		Contributions: []*combo.Contribution{gift(1, "rose"), gift(2, "lily")}})
	if err == nil || !strings.Contains(err.Error(), "degraded publish failed") {
		t.Fatalf("batch whose degraded publish is refused: %v, want its failure", err)
	}
	if n := admin.XLen(context.Background(), repo.NewKeys(1).Stream(0)).Val(); n != 1 {
		t.Fatalf("stream holds %d windows, want the one rose opened", n)
	}
	if got := testutil.ToFloat64(m.WindowsOpened); got != 1 {
		t.Errorf("combo_windows_opened_total %v, want 1: rose's window was opened and will be pushed", got)
	}
	if got := testutil.ToFloat64(m.Reports.WithLabelValues(metrics.OutcomeInternal)); got != 2 {
		t.Errorf(`combo_reports_total{outcome="internal"} %v, want 2 (the call failed whole)`, got)
	}
}

// A report whose caller gives up (its RPC timeout passes) while a shared
// pipeline carries it is answered by what that pipeline did: here Redis
// refuses writes, so it is published on its own, and counted degraded
// with its warning. Before, it was counted canceled, and the push it
// made showed in no metric and no log line.
func TestReportPushedAfterItsCallerGaveUpIsCountedDegraded(t *testing.T) {
	ctx := context.Background()
	var pipelines atomic.Int64
	release1, inSecond, release2 := make(chan struct{}), make(chan struct{}), make(chan struct{})
	r, admin := realRepo(t, 100000, "&*", testredis.PipelineHook(func(cmds []redis.Cmder) {
		// Report scripts name at least 3 keys (the stream, a window, the
		// probe), a degraded publish 2: only reports' pipelines count.
		if n := cmds[0].Name(); (n != "evalsha" && n != "eval") || fmt.Sprint(cmds[0].Args()[2]) == "2" {
			return
		}
		switch pipelines.Add(1) {
		case 1:
			<-release1
		case 2:
			close(inSecond)
			<-release2
		}
	}))
	if err := admin.ConfigSet(ctx, "min-replicas-to-write", "1").Err(); err != nil { // NOREPLICAS: reports degrade
		t.Fatal(err)
	}
	sub := admin.Subscribe(ctx, "act:7:contributions")
	t.Cleanup(func() { sub.Close() })
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zapcore.WarnLevel)
	m := metrics.New(prometheus.NewRegistry())
	h := New(r, 200*time.Millisecond, m, zap.New(core))

	first := make(chan error, 1)
	go func() { // runs the first pipeline, held
		_, err := h.ReportContribution(ctx, &combo.ReportContributionRequest{Contribution: gift(1, "rose")})
		first <- err
	}()
	waitFor(t, "the first report's pipeline to be held", func() bool { return pipelines.Load() > 0 })
	gone, cancel := context.WithCancel(ctx)
	defer cancel()
	second, secondID := make(chan error, 1), make(chan string, 1)
	go func() { // queued behind it: the next pipeline carries it
		secondID <- stacks.Self()
		_, err := h.ReportContribution(gone, &combo.ReportContributionRequest{Contribution: gift(2, "lily")})
		second <- err
	}()
	// The repo's queue is not visible from this package: its goroutine,
	// waiting in the coalescer's select, is. Were it not queued when the
	// first pipeline ends, it would run its own pipeline and never take
	// the path of a carried call whose caller gives up, passing on code
	// that counts that call canceled.
	id := <-secondID
	queued := func() bool {
		state, stack, ok := stacks.State(id)
		return ok && state == "select" && strings.Contains(stack, "repo.(*coalescer).do")
	}
	waitFor(t, "the second report to queue in the repo behind the held pipeline", queued)
	close(release1)
	testwait.Receive(t, "the pipeline carrying the second report", inSecond)
	cancel() // its caller gives up while the pipeline carries it
	waitFor(t, "the second report to see its caller give up", func() bool { return !queued() })
	close(release2)
	if err := testwait.Receive(t, "the first report's answer", first); err != nil {
		t.Fatal(err)
	}
	testwait.Receive(t, "the second report's answer", second) // nobody reads this answer
	rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer rcancel()
	for range 2 {
		if _, err := sub.ReceiveMessage(rctx); err != nil { // both were pushed on their own
			t.Fatalf("the two degraded reports not both pushed within 10 s: %v", err)
		}
	}
	if got := testutil.ToFloat64(m.Reports.WithLabelValues(metrics.OutcomeDegraded)); got != 2 {
		t.Errorf(`combo_reports_total{outcome="degraded"} %v, want 2: both reports were pushed on their own`, got)
	}
	if got := testutil.ToFloat64(m.Reports.WithLabelValues(metrics.OutcomeCanceled)); got != 0 {
		t.Errorf(`combo_reports_total{outcome="canceled"} %v, want 0: the report was sent, and pushed`, got)
	}
	if n := len(logs.FilterMessageSnippet("published on their own").All()); n != 2 {
		t.Errorf("%d warnings of reports published on their own, want 2", n)
	}
}
