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
	"github.com/combo-service/combo-service/push"
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
	ws := openWindow(t, r)
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

// An ACL user denied the push channels (Redis 7 gives a new user none
// unless told: acl-pubsub-default resetchannels) cannot publish. Its
// flush must then change nothing: the window stays pending with its data,
// and is published once the channel is granted. Before, the script
// deleted the window and its entry and only then failed at PUBLISH: every
// window of acknowledged reports was lost, and counted "gone" (already
// published elsewhere) at its retry.
func TestFlushDeniedTheChannelKeepsTheWindow(t *testing.T) {
	ctx := context.Background()
	admin, rdb := userDeniedChannels(t)
	sub := admin.Subscribe(ctx, push.Channel(7))
	t.Cleanup(func() { sub.Close() })
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	r := repo.New(rdb, settings())
	ws := openWindow(t, r)
	untilDue(t, r, ws)
	res, err := r.Flush(ctx, ws)
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Err == nil {
		t.Fatalf("flush denied the channel: %+v; want an error", res[0])
	}
	stream := r.Keys().Stream(0)
	if n := admin.XLen(ctx, stream).Val(); n != 1 {
		t.Fatalf("the denied flush left %d stream entries, want the window's 1", n)
	}
	if p := admin.XPending(ctx, stream, repo.Group).Val(); p == nil || p.Count != 1 {
		t.Fatalf("the denied flush left pending %+v, want the window's entry", p)
	}
	// The fix may be the channels or the command (PUBLISH is in @pubsub,
	// which a user built from @read and @write lacks): both are named.
	if msg := res[0].Err.Error(); !strings.Contains(msg, "NOPERM") || !strings.Contains(msg, push.Channel(7)) || !strings.Contains(msg, "+publish &act:*") {
		t.Errorf("the denied flush's error %q does not name NOPERM, the channel and the grants (+publish &act:*)", res[0].Err)
	}
	if err := admin.Do(ctx, "ACL", "SETUSER", "combo", "allchannels").Err(); err != nil {
		t.Fatal(err)
	}
	res, err = r.Flush(ctx, ws)
	if err != nil || res[0].Err != nil || res[0].Status != repo.Published || res[0].Quantity != 1 {
		t.Fatalf("flush once the channel is granted: %+v %v; want published, quantity 1", res, err)
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	msg, err := sub.ReceiveMessage(rctx)
	if err != nil {
		t.Fatal(err)
	}
	if m, err := push.Decode([]byte(msg.Payload)); err != nil || m.Record.ID != 1 || m.Record.Quantity != 1 {
		t.Fatalf("push %s: %+v %v", msg.Payload, m, err)
	}
}

// userDeniedChannels starts a Redis with an ACL user "combo" (password
// "pw") that may run every command on every key but PUBLISH on no channel,
// as Redis 7 makes a new user unless told (acl-pubsub-default
// resetchannels). It returns the default user's client and combo's.
func userDeniedChannels(t *testing.T) (admin, user *redis.Client) {
	t.Helper()
	srv := testredis.Start(t, testredis.Options{})
	admin = srv.Client()
	t.Cleanup(func() { admin.Close() })
	if err := admin.Do(context.Background(), "ACL", "SETUSER", "combo", "on", ">pw", "~*", "resetchannels", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	user = redis.NewClient(&redis.Options{Addr: srv.Addr, Username: "combo", Password: "pw", MaxRetries: -1})
	t.Cleanup(func() { user.Close() })
	return admin, user
}

// openWindow reports one contribution (id 1) through r and reads its new
// window from shard 0's stream as consumer "c1".
func openWindow(t *testing.T, r *repo.Repo) []repo.Window {
	t.Helper()
	return openWindowOf(t, r, 1, "rose")
}

// openWindowOf is openWindow with report id and item_type given.
func openWindowOf(t *testing.T, r *repo.Repo, id int64, itemType string) []repo.Window {
	t.Helper()
	ctx := context.Background()
	if err := r.EnsureGroups(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Report(ctx, []*combo.Contribution{contribution(id, itemType, time.Now().UnixMilli())}); err != nil {
		t.Fatal(err)
	}
	ws, _, _, err := r.Read(ctx, 0, "c1", ">", 10, -1)
	if err != nil || len(ws) != 1 {
		t.Fatalf("read %d windows, %v", len(ws), err)
	}
	return ws
}
