package repo_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/combo-service/combo-service/internal/testredis"
	"github.com/combo-service/combo-service/repo"
)

// readmeACLRules are the rules of README's "ACL SETUSER combo on >… ..."
// line, the one it says is enough, read from README so this test follows it.
func readmeACLRules(t *testing.T) []string {
	t.Helper()
	raw, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Join(strings.Fields(string(raw)), " ") // the line wraps
	const lead = "`ACL SETUSER combo on >… "
	i := strings.Index(s, lead)
	if i < 0 {
		t.Fatalf("README has no %q line", lead)
	}
	rules, _, _ := strings.Cut(s[i+len(lead):], "`")
	return strings.Fields(rules)
}

// A user with exactly README's ACL line runs every flow of the service,
// on one Redis and on a Redis Cluster: README says the line is enough, and
// an operator who trusts it has no other hint. (Before, it lacked
// CLUSTER SLOTS, which go-redis's cluster client sends to learn the slots:
// on a cluster every command, /readyz too, failed with NOPERM.)
func TestTheREADMEACLUserRunsEveryFlow(t *testing.T) {
	ctx := context.Background()
	setUser := append([]any{"ACL", "SETUSER", "combo", "reset", "on", ">pw"}, func() (a []any) {
		for _, r := range readmeACLRules(t) {
			a = append(a, r)
		}
		return a
	}()...)
	t.Run("one node", func(t *testing.T) {
		srv := testredis.Start(t, testredis.Options{})
		if err := srv.Client().Do(ctx, setUser...).Err(); err != nil {
			t.Fatal(err)
		}
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: "combo", Password: "pw", MaxRetries: -1})
		t.Cleanup(func() { rdb.Close() })
		runEveryFlow(t, rdb, repo.New(rdb, settings()))
	})
	t.Run("cluster", func(t *testing.T) {
		c := testredis.StartCluster(t, 3)
		if err := c.Client(t).ForEachShard(ctx, func(ctx context.Context, n *redis.Client) error {
			return n.Do(ctx, setUser...).Err()
		}); err != nil {
			t.Fatal(err)
		}
		cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs, Username: "combo", Password: "pw", MaxRetries: -1})
		t.Cleanup(func() { cc.Close() })
		runEveryFlow(t, cc, repo.New(cc, settings()))
	})
}
