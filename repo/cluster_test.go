package repo_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/combo-service/combo-service/internal/testredis"
	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/repo"
)

// On a Redis Cluster, a master that stops answering fails the reports of
// its own shards only: concurrent single reports on live masters' shards
// all succeed. (A shared pipeline spanning a dead node and a live one
// fails whole in go-redis: with one pipeline queue for all shards, 47 of
// 49 live-shard reports failed here.)
func TestDeadMasterFailsOnlyItsShardsReports(t *testing.T) {
	ctx := context.Background()
	const shards = 6
	cluster := testredis.StartCluster(t, 3)
	cc := cluster.Client(t)
	s := settings()
	s.Shards = shards
	s.Timeout = 300 * time.Millisecond
	r := repo.New(cc, s)
	if err := r.LoadScripts(ctx); err != nil {
		t.Fatal(err)
	}
	keys := r.Keys()
	deadAddr := cluster.MasterAddr(t, cc, keys.Stream(0))
	live := make([]bool, shards)
	for sh := range shards {
		live[sh] = cluster.MasterAddr(t, cc, keys.Stream(sh)) != deadAddr
	}
	if !slices.Contains(live, true) {
		t.Fatal("every shard on one master")
	}
	cluster.KillMaster(t, cc, deadAddr)

	var id atomic.Int64
	var liveOK, deadFailed atomic.Int64
	var mu sync.Mutex
	var liveErr, deadErr error
	var wg sync.WaitGroup
	stop := time.Now().Add(time.Second)
	for g := range 16 {
		wg.Go(func() {
			for time.Now().Before(stop) {
				n := id.Add(1)
				it := fmt.Sprint("t", g)
				c := &combo.Contribution{Id: n, ActivityId: 7, UserId: n, ItemId: 1, ItemType: it, Quantity: 1,
					CreatedAt: time.Now().UnixMilli()}
				_, err := r.Report(ctx, []*combo.Contribution{c})
				onLive := live[keys.Shard(7, n, it)]
				mu.Lock()
				switch {
				case onLive && err == nil:
					liveOK.Add(1)
				case onLive:
					liveErr = err
				case err == nil:
					deadErr = errors.New("a report on the dead master's shard succeeded")
				case !errors.Is(err, repo.ErrUnavailable):
					deadErr = err
				default:
					deadFailed.Add(1)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if liveErr != nil {
		t.Errorf("a report on a live master's shard failed: %v", liveErr)
	}
	if deadErr != nil {
		t.Errorf("dead master's shard: %v, want ErrUnavailable", deadErr)
	}
	if liveOK.Load() == 0 || deadFailed.Load() == 0 {
		t.Errorf("%d reports on live shards succeeded, %d on the dead one failed: want some of each", liveOK.Load(), deadFailed.Load())
	}
	t.Logf("live shards: %d reports ok; dead shards: %d unavailable", liveOK.Load(), deadFailed.Load())
}
