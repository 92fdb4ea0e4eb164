package repo_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/combo-service/combo-service/internal/testredis"
	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/repo"
)

// With wrong credentials nothing reaches Redis's data, so reports and
// flushes fail as Redis unavailable (UNAVAILABLE to the caller, who may
// retry on another replica), naming Redis's refusal. Before, a wrong
// password read as scripts that answered nothing ("report script: want 3
// values, got 0"), then as a failed degraded publish: INTERNAL.
func TestWrongCredentialsAreUnavailable(t *testing.T) {
	srv := testredis.Start(t, testredis.Options{})
	ctx := context.Background()
	good := srv.Client()
	if err := good.ConfigSet(ctx, "requirepass", "s3cret").Err(); err != nil {
		t.Fatal(err)
	}
	good = redis.NewClient(&redis.Options{Addr: srv.Addr, Password: "s3cret"})
	t.Cleanup(func() { good.Close() })
	// An open window, for a flush by the wrong client.
	r := repo.New(good, settings())
	if err := r.EnsureGroups(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Report(ctx, []*combo.Contribution{contribution(1, "rose", time.Now().UnixMilli())}); err != nil {
		t.Fatal(err)
	}
	ws, _, err := r.Read(ctx, 0, "c1", ">", 10, -1)
	if err != nil || len(ws) != 1 {
		t.Fatalf("read %d windows, %v", len(ws), err)
	}
	for _, tc := range []struct{ name, password, refusal string }{
		{"wrong password", "nope", "WRONGPASS"},
		{"no password", "", "unauthenticated"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A client each: Redis closes a connection whose request it
			// refused unauthenticated, and the next would read only EOF.
			bad := func() *repo.Repo {
				rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, Password: tc.password, MaxRetries: -1})
				t.Cleanup(func() { rdb.Close() })
				return repo.New(rdb, settings())
			}
			check := func(what string, err error) {
				t.Helper()
				if !errors.Is(err, repo.ErrUnavailable) || !strings.Contains(err.Error(), tc.refusal) {
					t.Errorf("%s: %v; want ErrUnavailable naming %s", what, err, tc.refusal)
				}
			}
			now := time.Now().UnixMilli()
			_, err := bad().Report(ctx, []*combo.Contribution{contribution(2, "rose", now)})
			check("single report", err)
			_, err = bad().Report(ctx, []*combo.Contribution{contribution(3, "rose", now), contribution(4, "rocket", now)})
			check("batch", err)
			_, err = bad().Flush(ctx, ws)
			check("flush", err)
		})
	}
	// Nothing the wrong clients sent was counted: the same ids, sent with
	// the right password, are new.
	now := time.Now().UnixMilli()
	res, err := r.Report(ctx, []*combo.Contribution{contribution(2, "rose", now), contribution(3, "rose", now), contribution(4, "rocket", now)})
	if err != nil {
		t.Fatal(err)
	}
	for i, rr := range res {
		if rr.Outcome == repo.Duplicate {
			t.Errorf("report %d: a duplicate: the wrong client's attempt was counted", i+2)
		}
	}
}
