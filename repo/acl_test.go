package repo_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/combo-service/combo-service/internal/testredis"
	"github.com/combo-service/combo-service/repo"
)

// A user with exactly README's ACL line runs every flow of the service,
// on one Redis and on a Redis Cluster: README says the line is enough, and
// an operator who trusts it has no other hint. (Before, it lacked
// CLUSTER SLOTS, which go-redis's cluster client sends to learn the slots:
// on a cluster every command, /readyz too, failed with NOPERM.)
func TestTheREADMEACLUserRunsEveryFlow(t *testing.T) {
	ctx := context.Background()
	setUser := []any{"ACL", "SETUSER", "combo", "reset", "on", ">pw"}
	for _, r := range testredis.READMEACLRules(t, "../README.md") {
		setUser = append(setUser, r)
	}
	t.Run("one node", func(t *testing.T) {
		srv := testredis.Start(t, testredis.Options{})
		if err := srv.Client().Do(ctx, setUser...).Err(); err != nil {
			t.Fatal(err)
		}
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: "combo", Password: "pw", MaxRetries: -1,
			DisableIdentity: true}) // as openRedis: no CLIENT SETINFO (Redis 7.2+), which README's line does not grant
		t.Cleanup(func() { rdb.Close() })
		runEveryFlow(t, rdb, repo.New(rdb, settings()))
		runSettingsFlow(t, repo.New(rdb, settings()))
		testredis.NoneDenied(t, srv.Client())
	})
	t.Run("cluster", func(t *testing.T) {
		c := testredis.StartCluster(t, 3)
		nodes := c.NodeClients(t)
		for _, n := range nodes {
			if err := n.Do(ctx, setUser...).Err(); err != nil {
				t.Fatal(err)
			}
		}
		cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs, Username: "combo", Password: "pw", MaxRetries: -1,
			DisableIdentity: true})
		t.Cleanup(func() { cc.Close() })
		runEveryFlow(t, cc, repo.New(cc, settings()))
		runSettingsFlow(t, repo.New(cc, settings()))
		for _, n := range nodes {
			testredis.NoneDenied(t, n)
		}
	})
}

// runSettingsFlow runs, as r, what the settings watch does: a claim of a
// consumer and a sharing of its settings at each reading, and at Stop the
// forgetting (forget.lua), both while a twin holds the claim and once this
// process does. The watch is off the readiness probe (a user denied it
// serves all the same), so runEveryFlow leaves it out.
func runSettingsFlow(t *testing.T, r *repo.Repo) {
	t.Helper()
	ctx := context.Background()
	for _, p := range []string{"p1", "p2", "p1"} { // p1 claims last
		if _, err := r.ClaimConsumer(ctx, "settings-flow", p, time.Minute); err != nil {
			t.Fatalf("ClaimConsumer: %v", err)
		}
		if _, err := r.ShareSettings(ctx, "settings-flow", "s", time.Minute); err != nil {
			t.Fatalf("ShareSettings: %v", err)
		}
	}
	if forgot, err := r.ForgetSettings(ctx, "settings-flow", "p2"); err != nil || forgot {
		t.Fatalf("ForgetSettings while a twin holds the claim: %v %v, want false", forgot, err)
	}
	if forgot, err := r.ForgetSettings(ctx, "settings-flow", "p1"); err != nil || !forgot {
		t.Fatalf("ForgetSettings holding the claim: %v %v, want true", forgot, err)
	}
}

// README's ACL user follows a slot being moved (a reshard): go-redis
// answers ASK with ASKING, which the user must be granted, or every
// command on the moving shard fails NOPERM until the move ends.
func TestTheREADMEACLUserFollowsASlotMove(t *testing.T) {
	ctx := context.Background()
	c := testredis.StartCluster(t, 3)
	admin := c.Client(t)
	for _, n := range c.NodeClients(t) {
		testredis.SetREADMEACLUser(t, func(args ...any) error { return n.Do(ctx, args...).Err() }, "../README.md", "pw")
	}
	key := repo.NewKeys(1).Stream(0)
	if err := admin.XAdd(ctx, &redis.XAddArgs{Stream: key, Values: []any{"k", "v"}}).Err(); err != nil {
		t.Fatal(err)
	}
	from := c.MasterAddr(t, admin, key)
	to := c.Addrs[0]
	if to == from {
		to = c.Addrs[1]
	}
	m := c.BeginMigration(t, key, from, to)
	m.Move(key) // the key is on the target; the slot still MIGRATING: ASK
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs, Username: "combo", Password: "pw", MaxRetries: -1})
	t.Cleanup(func() { cc.Close() })
	if n, err := cc.XLen(ctx, key).Result(); err != nil || n != 1 {
		t.Errorf("XLEN of a key moved, its slot still moving, as README's ACL user: %d %v, want 1", n, err)
	}
	m.Finish()
}

// README's ACL user may run nothing that reaches beyond its keys: on a
// shared Redis a grant by category let it list every key name (SCAN,
// RANDOMKEY) and flush or load other teams' functions and scripts.
func TestTheREADMEACLUserReachesNothingBeyondItsKeys(t *testing.T) {
	ctx := context.Background()
	srv := testredis.Start(t, testredis.Options{})
	admin := srv.Client()
	testredis.SetREADMEACLUser(t, func(args ...any) error { return admin.Do(ctx, args...).Err() }, "../README.md", "pw")
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: "combo", Password: "pw", MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	for _, cmd := range [][]any{
		{"SCAN", "0"}, {"RANDOMKEY"}, {"KEYS", "*"}, {"DBSIZE"}, {"FLUSHALL"}, {"FLUSHDB"},
		{"FUNCTION", "FLUSH"}, {"FUNCTION", "LIST"}, {"FCALL", "f", "0"}, {"SCRIPT", "FLUSH"}, {"SCRIPT", "KILL"},
		{"CLIENT", "KILL", "TYPE", "normal"}, {"CLIENT", "LIST"}, {"CONFIG", "GET", "*"},
		{"SUBSCRIBE", "act:1:contributions"}, {"MONITOR"}, {"GET", "session:alice"},
	} {
		if err := rdb.Do(ctx, cmd...).Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
			t.Errorf("%v as README's ACL user: %v, want NOPERM", cmd, err)
		}
	}
}
