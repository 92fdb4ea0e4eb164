package repo_test

import (
	"context"
	"testing"
	"time"

	"github.com/combo-service/combo-service/internal/testredis"
	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/repo"
	"github.com/combo-service/combo-service/window"
)

// The push path and window.Merge cut a window at the same millisecond for
// any size, a fractional one included (conf refuses one, repo.New does
// not): the push path rounded W down and Merge up, so at W = 200.5 ms rows
// 200 ms apart were one window for Merge and two for the push path.
func TestFractionalWindowCutsAsMergeDoes(t *testing.T) {
	rdb := serviceLikeClient(t, testredis.Start(t, testredis.Options{}).Addr)
	s := settings()
	s.Window = 200*time.Millisecond + 500*time.Microsecond
	r, _ := subscribedRepoWithGroups(t, rdb, s)
	res, err := r.Report(context.Background(), []*combo.Contribution{contribution(1, "rose", base), contribution(2, "rose", base+200)})
	if err != nil {
		t.Fatal(err)
	}
	merged := window.Merge([]window.Row{
		{ID: 1, ActivityID: 7, UserID: 42, ItemType: "rose", Quantity: 1, CreatedAt: base},
		{ID: 2, ActivityID: 7, UserID: 42, ItemType: "rose", Quantity: 1, CreatedAt: base + 200},
	}, s.Window)
	if len(merged) != 1 || res[1].Outcome != repo.Joined {
		t.Fatalf("Merge: %d windows; push path: %+v; want one window on both", len(merged), res[1])
	}
}
