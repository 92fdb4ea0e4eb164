package handler

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/combo-service/combo-service/internal/testredis"
	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/metrics"
	"github.com/combo-service/combo-service/repo"
)

// realRepo is a repo on a real redis-server whose user "combo" may PUBLISH
// on no channel (as Redis 7 makes a new user unless told), so every
// degraded publish fails (NOPERM), with redis.stream_maxlen maxLen. It
// returns the admin client too.
func realRepo(t *testing.T, maxLen int64, hooks ...redis.Hook) (*repo.Repo, *redis.Client) {
	t.Helper()
	ctx := context.Background()
	srv := testredis.Start(t, testredis.Options{})
	admin := srv.Client()
	t.Cleanup(func() { admin.Close() })
	if err := admin.Do(ctx, "ACL", "SETUSER", "combo", "on", ">pw", "~*", "resetchannels", "+@all").Err(); err != nil {
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
	r, admin := realRepo(t, 1) // the stream takes one window
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
