package repo_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/repo"
)

// Every window key expires (CONTRACT.md §4: only the streams have no TTL),
// however the report script last wrote it: opened, rewritten by a join
// that brings a smaller id, and parked by a report past W. A window whose
// entry is lost (a consumer group recreated, a stream trimmed by hand)
// would otherwise hold its memory for ever.
func TestWindowKeysExpire(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		s := settings()
		r, _ := subscribedRepo(t, rdb)
		// The record outlives window.stale a little (see repo.New), no more,
		// and no less: a window the flush cannot find before it is stale
		// would be lost uncounted (DESIGN-NOTES.md: the source design's
		// short TTL).
		most := s.Stale + s.Window + s.Grace + 10*time.Second
		expires := func(key string) {
			t.Helper()
			if ttl := rdb.PTTL(ctx, key).Val(); ttl < s.Stale || ttl > most {
				t.Fatalf("%s expires in %v, want between %v and %v", key, ttl, s.Stale, most)
			}
		}
		cur := r.Keys().Current(0, 7, 42, "rose")
		steps := []struct {
			c    *combo.Contribution
			want repo.ReportOutcome
		}{
			{contribution(10, "rose", base), repo.Opened},
			{contribution(5, "rose", base+1), repo.Joined}, // a smaller id: the record is rewritten
			{contribution(20, "rose", base+s.Window.Milliseconds()), repo.Opened},
		}
		for i, st := range steps {
			res, err := r.Report(ctx, []*combo.Contribution{st.c})
			if err != nil || res[0].Outcome != st.want {
				t.Fatalf("step %d: %+v %v, want outcome %d", i, res, err, st.want)
			}
			expires(cur)
		}
		ws, _, _, err := r.Read(ctx, 0, "c1", ">", 10, -1)
		if err != nil || len(ws) != 2 {
			t.Fatalf("read %+v %v", ws, err)
		}
		expires(r.Keys().Parked(0, ws[0].ID)) // the first window, displaced by the third report
	})
}

// A flush that retires a window acknowledges its entry as well as deleting
// it: an entry left in the group's pending list after its window was
// published is never read again, so the list only grows, and every
// claimer's scan walks it (and counts it deleted) for ever.
func TestFlushAcknowledgesWhatItRetires(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		r, sub := subscribedRepo(t, rdb)
		if _, err := r.Report(ctx, []*combo.Contribution{contribution(1, "rose", base)}); err != nil {
			t.Fatal(err)
		}
		ws, _, _, err := r.Read(ctx, 0, "c1", ">", 10, -1)
		if err != nil || len(ws) != 1 {
			t.Fatalf("read %+v %v", ws, err)
		}
		untilDue(t, r, ws)
		fr, err := r.Flush(ctx, ws)
		if err != nil || fr[0].Status != repo.Published {
			t.Fatalf("flush %+v %v", fr, err)
		}
		if _, err := receive(ctx, sub); err != nil {
			t.Fatal(err)
		}
		if st, err := r.StreamStats(ctx, 0); err != nil || st.Length != 0 || st.Pending != 0 {
			t.Fatalf("after the publish the stream holds %d entries, %d pending (%v), want none", st.Length, st.Pending, err)
		}
	})
}

// A window's data lives at least window.stale, with its production
// settings too (60 s): a window whose flush came late, within
// window.stale, must still find it and publish it, not take it for lost.
// settings()' 10 s stale is shorter than the margin repo.New adds, so a
// TTL cut to half of it still passed TestWindowKeysExpire.
func TestWindowKeysOutliveAProductionStale(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		s := settings()
		s.Window, s.Grace, s.Stale, s.Dedupe = 3*time.Second, 200*time.Millisecond, time.Minute, time.Minute
		r, _ := subscribedRepoWithGroups(t, rdb, s)
		cur := r.Keys().Current(0, 7, 42, "rose")
		atLeast := func(key string) {
			t.Helper()
			if ttl := rdb.PTTL(ctx, key).Val(); ttl < s.Stale {
				t.Fatalf("%s expires in %v, want at least window.stale (%v)", key, ttl, s.Stale)
			}
		}
		for i, c := range []*combo.Contribution{
			contribution(10, "rose", base),                         // opens
			contribution(5, "rose", base+1),                        // joins, rewriting the record
			contribution(20, "rose", base+s.Window.Milliseconds()), // opens the next, parking the first
		} {
			if _, err := r.Report(ctx, []*combo.Contribution{c}); err != nil {
				t.Fatalf("report %d: %v", i, err)
			}
			atLeast(cur)
		}
		ws, _, _, err := r.Read(ctx, 0, "c1", ">", 10, -1)
		if err != nil || len(ws) != 2 {
			t.Fatalf("read %+v %v", ws, err)
		}
		atLeast(r.Keys().Parked(0, ws[0].ID))
	})
}
