package repo_test

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/repo"
)

// TestDedupeCeilingCoversEveryIdOfItsBucket checks the ceiling that lets
// the report script skip the previous dedupe bucket (report.lua): it never
// falls below an id of its bucket, whatever order the ids came in, so every
// id of the bucket is still found there from the next one; only ids above
// it skip the lookup; and without it every id is looked up again.
// Buckets are a second long; an attempt whose steps strayed out of their
// second (a slow machine) is run again with new ids.
func TestDedupeCeilingCoversEveryIdOfItsBucket(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		s := settings()
		s.Dedupe = time.Second
		r := repo.New(rdb, s)
		if err := r.LoadScripts(ctx); err != nil {
			t.Fatal(err)
		}
		for attempt := int64(0); attempt < 3; attempt++ {
			off := attempt * 1_000_000
			var failures []string
			check := func(what string, ids []int64, want repo.ReportOutcome) {
				cs := make([]*combo.Contribution, len(ids))
				for i, id := range ids {
					cs[i] = contribution(off+id, fmt.Sprint("c", off+id), base)
				}
				res, err := r.Report(ctx, cs)
				if err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				for i, rr := range res {
					if rr.Outcome != want {
						failures = append(failures, fmt.Sprintf("%s: id %d outcome %d, want %d", what, ids[i], rr.Outcome, want))
					}
				}
			}
			lookups := func(what string, want int64, run func()) {
				before, ok := sismemberCalls(ctx, rdb)
				run()
				if after, _ := sismemberCalls(ctx, rdb); ok && after-before != want {
					failures = append(failures, fmt.Sprintf("%s: %d lookups in the previous bucket, want %d", what, after-before, want))
				}
			}

			b := startOfSecond(t, rdb)
			// A call whose largest id comes last, then smaller ids in later
			// calls: the ceiling must not fall.
			check("largest last", []int64{200, 8_000, 9_500}, repo.Opened)
			check("smaller", []int64{7_000}, repo.Opened)
			check("smallest", []int64{100}, repo.Opened)
			ceiling := r.Keys().SeenCeiling(0, b)
			got, err := rdb.Get(ctx, ceiling).Result()
			if redisSecond(t, rdb) != b {
				continue // strayed into the next bucket
			}
			if want := strconv.FormatInt(off+9_999, 10); err != nil || got != want {
				t.Fatalf("ceiling %s = %q %v, want %s", ceiling, got, err, want)
			}
			if ttl := rdb.PTTL(ctx, ceiling).Val(); ttl <= 0 || ttl > 3*s.Dedupe {
				t.Fatalf("ceiling expires in %v, want within three buckets", ttl)
			}

			waitForSecond(t, rdb, b+1)
			lookups("ids of the bucket before", 3, func() {
				check("ids of the bucket before", []int64{7_000, 100, 9_500}, repo.Duplicate)
			})
			lookups("new id above the ceiling", 0, func() {
				check("new id above the ceiling", []int64{10_000}, repo.Opened)
			})
			// An evicted (or deleted) ceiling: every id is looked up.
			if err := rdb.Del(ctx, ceiling).Err(); err != nil {
				t.Fatal(err)
			}
			lookups("without the ceiling", 2, func() {
				check("id of the bucket before, without the ceiling", []int64{8_000}, repo.Duplicate)
				check("new id, without the ceiling", []int64{20_000}, repo.Opened)
			})
			if redisSecond(t, rdb) != b+1 {
				continue // past the bucket whose sets the checks needed
			}
			for _, f := range failures {
				t.Error(f)
			}
			return
		}
		t.Fatal("every attempt strayed out of its second: the machine is too slow")
	})
}

// A call's ceiling is at least its largest id, ends in 999 (so it changes
// once per 1000 ids), and does not overflow.
func TestRoundUpID(t *testing.T) {
	for _, c := range []struct{ id, want int64 }{
		{1, 999}, {999, 999}, {1000, 1999}, {123_456, 123_999},
		{1_796_094_853_123_456_789, 1_796_094_853_123_456_999},
		{math.MaxInt64 - 999, math.MaxInt64 - 808}, // ...774808 -> ...774999
		{math.MaxInt64 - 998, math.MaxInt64},
		{math.MaxInt64, math.MaxInt64},
	} {
		if got := repo.RoundUpID(c.id); got != c.want {
			t.Errorf("RoundUpID(%d) = %d, want %d", c.id, got, c.want)
		}
	}
}

// sismemberCalls is Redis's count of SISMEMBER calls (scripts' included);
// false where INFO commandstats has none (miniredis).
func sismemberCalls(ctx context.Context, rdb redis.UniversalClient) (int64, bool) {
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(line, "cmdstat_sismember:calls="); ok {
			n, err := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
			return n, err == nil
		}
	}
	// No SISMEMBER yet on a Redis that keeps the stats.
	return 0, strings.Contains(info, "cmdstat_")
}

// redisSecond is Redis's clock in whole seconds: the dedupe bucket when
// window.dedupe is 1 s.
func redisSecond(t *testing.T, rdb redis.UniversalClient) int64 {
	t.Helper()
	now, err := rdb.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return now.Unix()
}

// startOfSecond waits until Redis's clock is in the first 300 ms of a
// second and returns that second.
func startOfSecond(t *testing.T, rdb redis.UniversalClient) int64 {
	t.Helper()
	for {
		now, err := rdb.Time(context.Background()).Result()
		if err != nil {
			t.Fatal(err)
		}
		if now.Nanosecond() < int(300*time.Millisecond) {
			return now.Unix()
		}
		time.Sleep(time.Second - time.Duration(now.Nanosecond()) + 5*time.Millisecond)
	}
}

// waitForSecond waits until Redis's clock reaches second sec.
func waitForSecond(t *testing.T, rdb redis.UniversalClient, sec int64) {
	t.Helper()
	for redisSecond(t, rdb) < sec {
		time.Sleep(5 * time.Millisecond)
	}
}
