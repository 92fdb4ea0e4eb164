package repo_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/repo"
)

// StreamStats says when the oldest window still in the stream comes due:
// the first entry's, whoever holds it, until its entry goes; none on an
// empty stream. The worker's overdue gauge, and the alert that tells a
// shard whose windows stopped being published, rest on it.
func TestStreamStatsOldestDue(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		r, _ := subscribedRepo(t, rdb)
		stats := func() repo.StreamStats { return shardStats(t, r) }
		if st := stats(); st != (repo.StreamStats{}) {
			t.Fatalf("empty stream: %+v, want all 0", st)
		}
		open := func(id int64, item string) {
			t.Helper()
			if _, err := r.Report(ctx, []*combo.Contribution{contribution(id, item, base)}); err != nil {
				t.Fatal(err)
			}
		}
		open(1, "a")
		time.Sleep(5 * time.Millisecond) // the second entry's id in a later ms
		open(2, "b")
		ws, _, _, err := r.Read(ctx, 0, "c1", ">", 1, 100*time.Millisecond) // the first read, the second not
		if err != nil || len(ws) != 1 {
			t.Fatalf("read: %v %v", ws, err)
		}
		rest, err := rdb.XRange(ctx, r.Keys().Stream(0), "("+ws[0].ID, "+").Result()
		if err != nil || len(rest) != 1 {
			t.Fatalf("the second entry: %v %v", rest, err)
		}
		delay := (settings().Window + settings().Grace + time.Millisecond).Milliseconds()
		if st := stats(); st.Length != 2 || st.Pending != 1 || st.OldestDue != ws[0].Due {
			t.Fatalf("two windows, the first read: %+v, want length 2, pending 1, oldest due %d", st, ws[0].Due)
		}
		if err := r.Drop(ctx, 0, []string{ws[0].ID}); err != nil {
			t.Fatal(err)
		}
		// The one left was never read: it counts all the same.
		secondDue := openedMs(t, rest[0].ID) + delay
		if st := stats(); st.Length != 1 || st.Pending != 0 || st.OldestDue != secondDue {
			t.Fatalf("the first gone: %+v, want length 1, pending 0, oldest due %d (its id %s)", st, secondDue, rest[0].ID)
		}
	})
}

// openedMs is an entry id's ms part.
func openedMs(t *testing.T, id string) int64 {
	t.Helper()
	ms, _, _ := strings.Cut(id, "-")
	n, err := strconv.ParseInt(ms, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// StreamStats says when the newest window still in the stream opened (its
// id's ms part), not the oldest's: the ids-ahead gauge compares it with
// Redis's clock, and after a clock step back only the windows opened
// since, the newest, are ahead of it. 0 once the stream is empty, even
// though the stream's last id stays where it was.
func TestStreamStatsNewestOpened(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		r, _ := subscribedRepo(t, rdb)
		stats := func() repo.StreamStats { return shardStats(t, r) }
		if st := stats(); st.NewestOpened != 0 {
			t.Fatalf("empty stream: NewestOpened %d, want 0", st.NewestOpened)
		}
		for i, item := range []string{"a", "b"} {
			if i > 0 {
				time.Sleep(5 * time.Millisecond) // the second entry's id in a later ms
			}
			if _, err := r.Report(ctx, []*combo.Contribution{contribution(int64(i+1), item, base)}); err != nil {
				t.Fatal(err)
			}
		}
		entries, err := rdb.XRange(ctx, r.Keys().Stream(0), "-", "+").Result()
		if err != nil || len(entries) != 2 {
			t.Fatalf("the entries: %v %v", entries, err)
		}
		first, last := openedMs(t, entries[0].ID), openedMs(t, entries[1].ID)
		if first == last {
			t.Fatalf("both entries opened in ms %d", first)
		}
		if st := stats(); st.NewestOpened != last {
			t.Fatalf("two windows: NewestOpened %d, want the newest's %d (the oldest's is %d)", st.NewestOpened, last, first)
		}
		if err := r.Drop(ctx, 0, []string{entries[0].ID, entries[1].ID}); err != nil {
			t.Fatal(err)
		}
		if st := stats(); st.NewestOpened != 0 {
			t.Fatalf("both gone: NewestOpened %d, want 0", st.NewestOpened)
		}
	})
}

// shardStats is r.StreamStats of shard 0, which must succeed.
func shardStats(t *testing.T, r *repo.Repo) repo.StreamStats {
	t.Helper()
	st, err := r.StreamStats(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// LastID is the newest entry's id (the final read at shutdown reads new
// entries up to it; the oldest would leave this replica's later windows
// unread), and PendingIDs lists only the given consumer's pending
// entries, in id order (the final read re-reads those, not another
// replica's).
func TestLastIDAndPendingIDsOfOneConsumer(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		r, _ := subscribedRepoWithGroups(t, rdb, settings())
		if last, err := r.LastID(ctx, 0); err != nil || last != "" {
			t.Fatalf("LastID of an empty stream: %q %v, want none", last, err)
		}
		for i := range 3 {
			if res, err := r.Report(ctx, []*combo.Contribution{contribution(int64(i+1), fmt.Sprint("k", i), base)}); err != nil || res[0].Outcome != repo.Opened {
				t.Fatalf("report %d: %+v %v", i, res, err)
			}
		}
		mine, _, _, err := r.Read(ctx, 0, "c1", ">", 2, -1)
		if err != nil || len(mine) != 2 {
			t.Fatalf("c1's read: %+v %v, want two windows", mine, err)
		}
		theirs, _, _, err := r.Read(ctx, 0, "c2", ">", 1, -1)
		if err != nil || len(theirs) != 1 {
			t.Fatalf("c2's read: %+v %v, want one window", theirs, err)
		}
		if last, err := r.LastID(ctx, 0); err != nil || last != theirs[0].ID {
			t.Fatalf("LastID: %q %v, want the newest entry %s", last, err, theirs[0].ID)
		}
		ids, err := r.PendingIDs(ctx, 0, "c1", "-", 10)
		if err != nil || len(ids) != 2 || ids[0] != mine[0].ID || ids[1] != mine[1].ID {
			t.Fatalf("c1's pending ids: %v %v, want %s and %s, not c2's %s", ids, err, mine[0].ID, mine[1].ID, theirs[0].ID)
		}
	})
}
