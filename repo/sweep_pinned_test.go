package repo_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/combo-service/combo-service/internal/testredis"
	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/repo"
)

// Tests pinning what a mutation sweep of repo/ found no test for.

// A report that lands after Redis lost the stream and before a worker
// made the group again (its XADD makes the stream) is read once the group
// is back: the group starts at the stream's beginning, not at its end,
// where such windows would never be read and would fill the stream.
func TestAReportBeforeTheGroupIsBackIsRead(t *testing.T) {
	srv := testredis.Start(t, testredis.Options{})
	ctx := context.Background()
	rdb := srv.Client()
	r := repo.New(rdb, settings())
	if _, err := r.Report(ctx, []*combo.Contribution{contribution(1, "rose", time.Now().UnixMilli())}); err != nil {
		t.Fatal(err)
	}
	if err := r.EnsureGroup(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if ws, _, _, err := r.Read(ctx, 0, "c", ">", 10, -1); err != nil || len(ws) != 1 {
		t.Fatalf("read after the group was made: %v %v, want the window reported before", ws, err)
	}
}

// A Redis busy with a script past busy-reply-threshold answers BUSY to
// every other command, which ran nothing: a report is refused
// unavailable (callers retry it elsewhere or later), not degraded, whose
// publish Redis refuses the same way, ending INTERNAL.
func TestBusyRedisIsUnavailable(t *testing.T) {
	srv := testredis.Start(t, testredis.Options{})
	ctx := context.Background()
	rdb := srv.Client()
	r := repo.New(rdb, settings())
	if err := r.LoadScripts(ctx); err != nil {
		t.Fatal(err)
	}
	if err := rdb.ConfigSet(ctx, "busy-reply-threshold", "50").Err(); err != nil {
		t.Fatal(err)
	}
	busy := srv.Client()
	done := make(chan error, 1)
	go func() { done <- busy.Eval(ctx, "while true do end", nil).Err() }()
	other := srv.Client()
	deadline := time.Now().Add(10 * time.Second)
	for err := other.Ping(ctx).Err(); err == nil || !strings.HasPrefix(err.Error(), "BUSY"); err = other.Ping(ctx).Err() {
		if time.Now().After(deadline) {
			t.Fatalf("Redis never answered BUSY: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	_, err := r.Report(ctx, []*combo.Contribution{contribution(1, "rose", time.Now().UnixMilli())})
	if kill := other.ScriptKill(ctx).Err(); kill != nil {
		t.Fatalf("SCRIPT KILL: %v", kill)
	}
	<-done
	if !errors.Is(err, repo.ErrUnavailable) || !strings.Contains(err.Error(), "BUSY") {
		t.Fatalf("a report to a busy Redis: %v, want ErrUnavailable naming BUSY", err)
	}
}
