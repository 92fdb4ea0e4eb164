package repo_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/combo-service/combo-service/internal/testredis"
	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/repo"
)

// A batch spanning nodes fails when one node's part has its degraded
// publish fail (here every channel is denied to the Redis user), yet every
// part's opened windows exist and will be pushed: the call's error says
// how many (repo.WindowsOpened, which combo_windows_opened_total adds, and
// no retry opens them again), the parts that succeeded and the failed
// parts' other reports alike. The node numbered k (repo.ShardNodes, the
// order the parts are answered in) opens 1<<k windows, so a part left out,
// counted twice, or given another failed part's count is seen in the sum;
// the cases put the failed part first, last, and beside another.
func TestBatchSpanningNodesWithAFailedPublishCountsEveryPartsWindows(t *testing.T) {
	ctx := context.Background()
	cluster := testredis.StartCluster(t, 3)
	admin := cluster.Client(t)
	if err := admin.ForEachShard(ctx, func(ctx context.Context, n *redis.Client) error {
		return n.Do(ctx, "ACL", "SETUSER", "combo", "on", ">pw", "~*", "resetchannels", "+@all").Err()
	}); err != nil {
		t.Fatal(err)
	}
	user := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs, Username: "combo", Password: "pw", MaxRetries: -1})
	t.Cleanup(func() { user.Close() })
	s := settings()
	s.Shards = 12 // so that each of the 3 masters serves some
	keys := repo.NewKeys(s.Shards)
	var err error
	if s.ShardNodes, err = repo.ShardNodes(ctx, user, keys); err != nil {
		t.Fatal(err)
	}
	if n := slices.Max(s.ShardNodes) + 1; n != 3 {
		t.Fatalf("shards on %d nodes, want 3", n)
	}
	r := repo.New(user, s)
	if err := r.LoadScripts(ctx); err != nil {
		t.Fatal(err)
	}
	for i, tc := range []struct {
		name string
		fail []int // ranks of the nodes whose part degrades a report
	}{
		{"first node's part", []int{0}},
		{"last node's part", []int{2}},
		{"two parts", []int{1, 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			uid := int64(1000 * (i + 1)) // new combo keys for each case
			on := func(node int, itemType string) *combo.Contribution {
				for uid++; s.ShardNodes[keys.Shard(7, uid, itemType)] != node; uid++ {
				}
				return &combo.Contribution{Id: uid, ActivityId: 7, UserId: uid, ItemId: 1, ItemType: itemType,
					Quantity: 1, CreatedAt: time.Now().UnixMilli()}
			}
			var batch []*combo.Contribution
			for node := range 3 {
				for range 1 << node {
					batch = append(batch, on(node, "rose"))
				}
				if slices.Contains(tc.fail, node) {
					// Its window key holds a hash: its script fails WRONGTYPE
					// and it degrades, its publish then refused (NOPERM).
					c := on(node, "tulip")
					if err := admin.HSet(ctx, keys.Current(keys.Shard(7, c.UserId, c.ItemType), 7, c.UserId, c.ItemType), "x", "y").Err(); err != nil {
						t.Fatal(err)
					}
					batch = append(batch, c)
				}
			}
			_, err := r.Report(ctx, batch)
			if err == nil || !strings.Contains(err.Error(), "degraded publish failed") {
				t.Fatalf("batch spanning nodes, parts %v with a publish refused: %v, want the publish's failure", tc.fail, err)
			}
			if n := repo.WindowsOpened(err); n != 7 {
				t.Errorf("the failed batch opened %d windows by repo.WindowsOpened, want 7 (1+2+4, every node's part)", n)
			}
		})
	}
}
