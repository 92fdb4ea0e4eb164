package repo_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/combo-service/combo-service/internal/testredis"
	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/repo"
)

// redisNowMs is Redis's clock in ms, the clock the scripts date buckets by.
func redisNowMs(t *testing.T, rdb redis.UniversalClient) int64 {
	t.Helper()
	now, err := rdb.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return now.UnixMilli()
}

// dedupeBucket is the bucket number in dedupe set key, named
// prefix<bucket>:<sub>.
func dedupeBucket(t *testing.T, prefix, key string) int64 {
	t.Helper()
	rest := strings.TrimPrefix(key, prefix)
	i := strings.IndexByte(rest, ':')
	if i < 0 {
		t.Fatalf("dedupe set %s: want %s<bucket>:<sub>", key, prefix)
	}
	b, err := strconv.ParseInt(rest[:i], 10, 64)
	if err != nil {
		t.Fatalf("dedupe set %s: bucket: %v", key, err)
	}
	return b
}

// checkDedupeSetsLiveThroughTheNextBucket asserts every dedupe set of shard
// 0 expires no earlier than the end of the bucket after its own (Redis's
// clock), and that there is at least one to check.
func checkDedupeSetsLiveThroughTheNextBucket(t *testing.T, rdb redis.UniversalClient, r *repo.Repo, bucketMs int64) {
	t.Helper()
	ctx := context.Background()
	prefix := r.Keys().SeenPrefix(0)
	keys, err := rdb.Keys(ctx, prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) == 0 {
		t.Fatalf("no dedupe set (%s*) after the call: the id was not remembered at all", prefix)
	}
	now := redisNowMs(t, rdb)
	for _, k := range keys {
		b := dedupeBucket(t, prefix, k)
		want := (b+2)*bucketMs - now
		ttl, err := rdb.PTTL(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if ttl.Milliseconds() < want-100 {
			t.Errorf("dedupe set %s expires in %d ms, must live %d ms more (to the end of bucket %d, the next one)",
				k, ttl.Milliseconds(), want, b+1)
		}
	}
}

// An id is looked up in its own bucket's dedupe set and the previous
// one's, so a set must live until the NEXT bucket ends: one that expired
// with its own bucket (plus the 2 s for the embedded Redis) left an id
// remembered for as little as ~2 s of the 60 s window.dedupe, and a retry
// of a report whose answer was lost was counted (and pushed) a second
// time. Both the report script and the degraded publish make these sets.
func TestDedupeSetLivesThroughTheNextBucket(t *testing.T) {
	const bucketMs = 10_000 // settings(): window.dedupe 10 s
	t.Run("report", func(t *testing.T) {
		ctx := context.Background()
		rdb := serviceLikeClient(t, testredis.Start(t, testredis.Options{}).Addr)
		r, _ := subscribedRepoWith(t, rdb, settings())
		res, err := r.Report(ctx, []*combo.Contribution{contribution(1, "k0", base), contribution(8193+2, "k1", base)})
		if err != nil || res[0].Outcome != repo.Opened || res[1].Outcome != repo.Opened {
			t.Fatalf("report: %+v %v, want both opened", res, err)
		}
		checkDedupeSetsLiveThroughTheNextBucket(t, rdb, r, bucketMs)
	})
	t.Run("degraded publish", func(t *testing.T) {
		ctx := context.Background()
		rdb := serviceLikeClient(t, testredis.Start(t, testredis.Options{}).Addr)
		r, sub := subscribedRepoWith(t, rdb, settings())
		c := contribution(5, "k0", base)
		known, err := repo.PublishSingles(ctx, r, []*combo.Contribution{c})
		if err != nil || known[c.Id] {
			t.Fatalf("degraded publish: %v %v, want published", known, err)
		}
		if _, err := receive(ctx, sub); err != nil {
			t.Fatal(err)
		}
		checkDedupeSetsLiveThroughTheNextBucket(t, rdb, r, bucketMs)
	})
}

// A window.dedupe of a fraction of a second more than whole ones (1.5 s,
// which the configuration takes) makes buckets of the next whole second
// up (2 s), not down (1 s): rounded down, an id was remembered for as
// little as about 1.1 s of the 1.5 s, and a retry after that counted twice.
func TestFractionalDedupeRoundsTheBucketUp(t *testing.T) {
	ctx := context.Background()
	rdb := serviceLikeClient(t, testredis.Start(t, testredis.Options{}).Addr)
	s := settings()
	s.Dedupe = 1500 * time.Millisecond
	r, _ := subscribedRepoWith(t, rdb, s)
	if res, err := r.Report(ctx, []*combo.Contribution{contribution(1, "k0", base)}); err != nil || res[0].Outcome != repo.Opened {
		t.Fatalf("report: %+v %v, want opened", res, err)
	}
	checkDedupeSetsLiveThroughTheNextBucket(t, rdb, r, 2000)
}

// A degraded publish looks its id up in the previous bucket's dedupe set
// too: a report counted (or published on its own) late in one bucket and
// sent again early in the next was otherwise pushed a second time, its id
// found only in the set of the bucket before.
func TestDegradedPublishFindsTheIdInThePreviousBucket(t *testing.T) {
	ctx := context.Background()
	rdb := serviceLikeClient(t, testredis.Start(t, testredis.Options{}).Addr)
	s := settings()
	const bucketMs = 10_000 // s.Dedupe
	r, sub := subscribedRepoWith(t, rdb, s)
	c := contribution(8192*3+17, "k0", base)
	bucket := seedPreviousBucket(t, rdb, r, c, bucketMs)
	known, err := repo.PublishSingles(ctx, r, []*combo.Contribution{c})
	if after := redisNowMs(t, rdb) / bucketMs; after != bucket {
		t.Fatalf("the bucket changed during the test (%d to %d): the seeded set is no longer the previous one", bucket, after)
	}
	if err != nil || !known[c.Id] {
		t.Errorf("degraded publish of an id in the previous bucket's set: %v %v, want it answered remembered (duplicate)", known, err)
	}
	if msg, err := testredis.MessageBeforePong(ctx, sub); err != nil {
		t.Fatal(err)
	} else if msg != nil {
		t.Fatalf("pushed again an id the previous bucket remembered: %s", msg.Payload)
	}
}

// A window's total is an int32 (the push's quantity): a report that brings
// it to exactly 2147483647 still joins it; only one that would pass it
// opens a new window. Refusing the exact maximum split a window that fit,
// pushing a combo as two.
func TestWindowTotalReachesExactlyMaxInt32(t *testing.T) {
	ctx := context.Background()
	rdb := serviceLikeClient(t, testredis.Start(t, testredis.Options{}).Addr)
	r, _ := subscribedRepoWith(t, rdb, settings())
	const maxQuantity = 1_000_000 // validate.MaxQuantity
	var cs []*combo.Contribution
	for i := range 2147 {
		c := contribution(int64(i+1), "big", base)
		c.Quantity = maxQuantity
		cs = append(cs, c)
	}
	last := contribution(2148, "big", base)
	last.Quantity = 483_647 // 2147 * 1,000,000 + 483,647 = 2147483647
	cs = append(cs, last)
	var res []repo.ReportResult
	for len(cs) > 0 { // batches of ReportContributions' limit
		n := min(len(cs), 1000)
		got, err := r.Report(ctx, cs[:n])
		if err != nil {
			t.Fatal(err)
		}
		res, cs = append(res, got...), cs[n:]
	}
	if res[0].Outcome != repo.Opened {
		t.Fatalf("first report: %+v, want opened", res[0])
	}
	for i, g := range res[1:] {
		if g.Outcome != repo.Joined || g.WindowID != 1 {
			t.Fatalf("report %d: %+v, want joined to window 1", i+2, g)
		}
	}
	if got := res[len(res)-1]; got.WindowQuantity != 2147483647 {
		t.Fatalf("window total after the last report: %d, want 2147483647", got.WindowQuantity)
	}
	one := contribution(2149, "big", base) // one unit more would overflow it
	got, err := r.Report(ctx, []*combo.Contribution{one})
	if err != nil || got[0].Outcome != repo.Opened || got[0].WindowID != one.Id || got[0].WindowQuantity != 1 {
		t.Fatalf("one unit past 2147483647: %+v %v, want a new window of 1", got, err)
	}
	if n := rdb.XLen(ctx, r.Keys().Stream(0)).Val(); n != 2 {
		t.Fatalf("stream holds %d windows, want 2", n)
	}
}

// A claim takes only entries idle past its min-idle: with none, live
// replicas took each other's windows just read, on every claim tick, each
// then flushing (or retiring) windows another was flushing too.
func TestClaimLeavesAnotherConsumersFreshEntry(t *testing.T) {
	const minIdle = 2 * time.Second
	ctx := context.Background()
	rdb := serviceLikeClient(t, testredis.Start(t, testredis.Options{}).Addr)
	r, _ := subscribedRepoWithGroups(t, rdb, settings())
	if res, err := r.Report(ctx, []*combo.Contribution{contribution(1, "rose", base)}); err != nil || res[0].Outcome != repo.Opened {
		t.Fatalf("report: %+v %v", res, err)
	}
	ws, _, _, err := r.Read(ctx, 0, "a", ">", 10, -1)
	if err != nil || len(ws) != 1 {
		t.Fatalf("read by a: %v %v, want 1 window", ws, err)
	}
	read := time.Now()
	claimed, _, _, _, err := r.Claim(ctx, 0, "b", minIdle, "0-0", 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(claimed) != 0 {
		t.Fatalf("b claimed %d window(s) a read %v ago, min-idle %v: want none", len(claimed), time.Since(read), minIdle)
	}
	if p := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: r.Keys().Stream(0), Group: repo.Group,
		Start: "-", End: "+", Count: 10}).Val(); len(p) != 1 || p[0].Consumer != "a" {
		t.Fatalf("pending after b's claim: %+v, want the entry still a's", p)
	}
	time.Sleep(minIdle + 200*time.Millisecond - time.Since(read))
	claimed, _, _, _, err = r.Claim(ctx, 0, "b", minIdle, "0-0", 10)
	if err != nil || len(claimed) != 1 || claimed[0].ID != ws[0].ID {
		t.Fatalf("b's claim past min-idle: %v %v, want a's window %s", claimed, err, ws[0].ID)
	}
}
