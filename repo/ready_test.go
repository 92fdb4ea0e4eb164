package repo_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/combo-service/combo-service/internal/testredis"
	"github.com/combo-service/combo-service/repo"
)

// Ready passes on a primary (and the embedded Redis) and changes
// nothing there.
func TestReadyOnAPrimary(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		r := repo.New(rdb, settings())
		if err := r.Ready(context.Background()); err != nil {
			t.Fatalf("Ready on a primary: %v", err)
		}
		if n := rdb.DBSize(context.Background()).Val(); n != 0 {
			t.Fatalf("the probe wrote %d keys", n)
		}
	})
}

// A read-only replica answers PING but refuses every report: it is not
// ready, and the error says why.
func TestReadyRefusesAReplica(t *testing.T) {
	primary := testredis.Start(t, testredis.Options{})
	replica := testredis.Start(t, testredis.Options{Args: []string{"--replicaof", "127.0.0.1", strconv.Itoa(primary.Port)}})
	rdb := replica.Client()
	ctx := context.Background()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("replica PING: %v", err)
	}
	r := repo.New(rdb, settings())
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := r.Ready(ctx)
		if err != nil && strings.Contains(err.Error(), "READONLY") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Ready on a replica: %v, want a READONLY error", err)
		}
		time.Sleep(50 * time.Millisecond) // the replica may still be loading from its primary
	}
}

// A Redis that answers but refuses writes for its own reasons leaves
// reports degraded, not UNAVAILABLE, on every replica alike: each stays
// ready (readiness-gated routing would otherwise drop them all at once).
func TestReadyWhileWritesAreRefused(t *testing.T) {
	rdb := testredis.Start(t, testredis.Options{}).Client()
	ctx := context.Background()
	if err := rdb.ConfigSet(ctx, "min-replicas-to-write", "1").Err(); err != nil {
		t.Fatal(err)
	}
	r := repo.New(rdb, settings())
	if err := rdb.Del(ctx, r.Keys().Probe(0)).Err(); err == nil || !strings.HasPrefix(err.Error(), "NOREPLICAS") {
		t.Fatalf("a write: %v, want NOREPLICAS", err)
	}
	if err := r.Ready(ctx); err != nil {
		t.Fatalf("Ready while writes are refused: %v", err)
	}
}

// A replica whose password or ACL user Redis refuses fails every report,
// degraded ones included: it is not ready (a rollout with a wrong
// password must stop there).
func TestReadyRefusesAWrongPasswordOrUser(t *testing.T) {
	srv := testredis.Start(t, testredis.Options{})
	admin := srv.Client()
	ctx := context.Background()
	if err := admin.Do(ctx, "ACL", "SETUSER", "narrow", "on", ">pw", "~*", "+ping", "+get").Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.ConfigSet(ctx, "requirepass", "s3cret").Err(); err != nil {
		t.Fatal(err)
	}
	for name, opts := range map[string]*redis.Options{
		"no password":    {Addr: srv.Addr},
		"wrong password": {Addr: srv.Addr, Password: "nope"},
		"narrow user":    {Addr: srv.Addr, Username: "narrow", Password: "pw"},
	} {
		rdb := redis.NewClient(opts)
		err := repo.New(rdb, settings()).Ready(ctx)
		rdb.Close()
		if err == nil {
			t.Errorf("%s: ready", name)
		}
	}
}

// A user allowed EVALSHA but not EVAL runs the reports from the scripts
// LoadScripts cached; the probe is cached with them, so it is ready too.
func TestReadyWithEvalshaOnly(t *testing.T) {
	srv := testredis.Start(t, testredis.Options{})
	ctx := context.Background()
	if err := srv.Client().Do(ctx, "ACL", "SETUSER", "shaonly", "on", ">pw", "~*", "&*", "+@all", "-eval").Err(); err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: "shaonly", Password: "pw"})
	defer rdb.Close()
	r := repo.New(rdb, settings())
	if err := r.LoadScripts(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.Ready(ctx); err != nil {
		t.Fatalf("Ready for a user without EVAL: %v", err)
	}
}

// A user that may write the service's keys but not PUBLISH on the push
// channels (Redis 7 gives a new ACL user no channel unless told) takes
// every report and pushes no window: it is not ready, and the error says
// why. Granted the channels, it is.
func TestReadyRefusesAUserDeniedTheChannels(t *testing.T) {
	ctx := context.Background()
	admin, rdb := userDeniedChannels(t)
	r := repo.New(rdb, settings())
	if err := r.Ready(ctx); err == nil || !strings.Contains(err.Error(), "NOPERM") || !strings.Contains(err.Error(), "PUBLISH") {
		t.Fatalf("Ready for a user denied the channels: %v; want NOPERM naming PUBLISH", err)
	}
	if err := admin.Do(ctx, "ACL", "SETUSER", "combo", "&act:*").Err(); err != nil {
		t.Fatal(err)
	}
	if err := r.Ready(ctx); err != nil {
		t.Fatalf("Ready once granted &act:*: %v", err)
	}
	if n := admin.DBSize(ctx).Val(); n != 0 {
		t.Fatalf("the probe wrote %d keys", n)
	}
}

// A user granted the push channels but not the PUBLISH command (one built
// from @read, @write, @stream and @scripting: PUBLISH is in @pubsub) is
// refused as well, and the error names both grants: told only "&act:*",
// which it has, the operator could not fix it.
func TestReadyNamesThePublishCommand(t *testing.T) {
	srv := testredis.Start(t, testredis.Options{})
	ctx := context.Background()
	admin := srv.Client()
	if err := admin.Do(ctx, "ACL", "SETUSER", "combo", "on", ">pw", "~combo:*", "&act:*",
		"+@read", "+@write", "+@stream", "+@scripting", "+@connection", "+time").Err(); err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: "combo", Password: "pw"})
	t.Cleanup(func() { rdb.Close() })
	r := repo.New(rdb, settings())
	if err := r.Ready(ctx); err == nil || !strings.Contains(err.Error(), "+publish") {
		t.Fatalf("Ready for a user without PUBLISH: %v; want NOPERM naming +publish", err)
	}
	if err := admin.Do(ctx, "ACL", "SETUSER", "combo", "+publish").Err(); err != nil {
		t.Fatal(err)
	}
	if err := r.Ready(ctx); err != nil {
		t.Fatalf("Ready once granted +publish: %v", err)
	}
}
