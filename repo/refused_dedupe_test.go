package repo_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/combo-service/combo-service/internal/testredis"
	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/push"
	"github.com/combo-service/combo-service/repo"
)

// While Redis refuses writes, a counted id is found by two checks: the
// report script's reads, and the degraded publish's, for ids the script
// could not answer. TestDuplicateWhileWritesAreRefused sees them together,
// each covering for the other; these see each alone.

// countedThenRefusing counts id 1, then makes Redis refuse writes
// (min-replicas-to-write with no replica: NOREPLICAS). With
// previousBucket, the dedupe buckets are of 1 s and Redis's clock is in
// the bucket after the one id 1 was counted in when writes are refused:
// it is found only in the previous bucket's set.
func countedThenRefusing(t *testing.T, previousBucket bool) (*redis.Client, *repo.Repo, *redis.PubSub, *combo.Contribution) {
	t.Helper()
	rdb := testredis.Start(t, testredis.Options{}).Client()
	ctx := context.Background()
	s := settings()
	if previousBucket {
		s.Dedupe = time.Second
	}
	r, sub := subscribedRepoWith(t, rdb, s)
	counted := contribution(1, "rose", base)
	if res, err := r.Report(ctx, []*combo.Contribution{counted}); err != nil || res[0].Outcome != repo.Opened {
		t.Fatalf("first report: %+v %v", res, err)
	}
	if previousBucket {
		sets, err := rdb.Keys(ctx, r.Keys().SeenPrefix(0)+"*").Result()
		if err != nil || len(sets) != 1 {
			t.Fatalf("dedupe sets %v %v, want one", sets, err)
		}
		bucket := dedupeBucket(t, r.Keys().SeenPrefix(0), sets[0])
		for redisNowMs(t, rdb)/1000 <= bucket {
			time.Sleep(5 * time.Millisecond)
		}
		if now := redisNowMs(t, rdb) / 1000; now != bucket+1 {
			t.Fatalf("Redis's clock went from bucket %d to %d, past the next one", bucket, now)
		}
	}
	if err := rdb.ConfigSet(ctx, "min-replicas-to-write", "1").Err(); err != nil {
		t.Fatal(err)
	}
	return rdb, r, sub, counted
}

// inEitherBucket runs test with id 1 counted in the current dedupe bucket
// and in the previous one.
func inEitherBucket(t *testing.T, test func(t *testing.T, previousBucket bool)) {
	t.Run("this bucket", func(t *testing.T) { test(t, false) })
	t.Run("previous bucket", func(t *testing.T) { test(t, true) })
}

// The report script answers a counted id duplicate by its reads alone,
// with no degraded publish behind it (a round trip more, and a failure of
// the call if that publish fails too).
func TestReportScriptAnswersACountedIDWhileWritesAreRefused(t *testing.T) {
	inEitherBucket(t, func(t *testing.T, previousBucket bool) {
		rdb, r, _, counted := countedThenRefusing(t, previousBucket)
		publishes := &publishCounter{}
		rdb.AddHook(publishes)
		res, err := r.Report(context.Background(), []*combo.Contribution{counted})
		if err != nil || res[0].Outcome != repo.Duplicate {
			t.Fatalf("counted id again while writes are refused: %+v %v, want duplicate", res, err)
		}
		if n := publishes.alone.Load() + publishes.inPipelines.Load(); n != 0 {
			t.Fatalf("%d degraded publishes for an id the report script could find counted, want 0", n)
		}
	})
}

// The degraded publish finds a counted id by itself, and does not publish
// it again.
func TestDegradedPublishFindsACountedIDWhileWritesAreRefused(t *testing.T) {
	inEitherBucket(t, func(t *testing.T, previousBucket bool) {
		rdb, r, sub, counted := countedThenRefusing(t, previousBucket)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		known, err := repo.PublishSingles(ctx, r, []*combo.Contribution{counted})
		if err != nil || !known[counted.Id] {
			t.Fatalf("degraded publish of a counted id: known %v, %v; want it known", known, err)
		}
		if err := rdb.Publish(ctx, push.Channel(7), "sentinel").Err(); err != nil {
			t.Fatal(err)
		}
		if msg, err := receive(ctx, sub); err != nil || msg.Payload != "sentinel" {
			t.Fatalf("got %v %v before the sentinel: the counted id was published again", msg, err)
		}
	})
}

// A report counted late in one bucket and sent again early in the next,
// to a demoted master (a replica now, its dedupe sets stale), fails
// UNAVAILABLE (READONLY): the scripts write first and look up after, so
// the previous bucket's stale set does not make it answer duplicate for a
// report the new master may never have had (lost: counted nowhere).
func TestRetryOnADemotedMasterOfAnIDOfThePreviousBucketIsNotADuplicate(t *testing.T) {
	const bucketMs = 10_000 // settings(): window.dedupe 10 s
	ctx := context.Background()
	rdb := testredis.Start(t, testredis.Options{}).Client()
	r, _ := subscribedRepoNoGroups(t, rdb)
	c := contribution(8192*2+9, "rose", base)
	bucket := seedPreviousBucket(t, rdb, r, c, bucketMs)
	demote(t, rdb)
	res, err := r.Report(ctx, []*combo.Contribution{c})
	if after := redisNowMs(t, rdb) / bucketMs; after != bucket {
		t.Fatalf("the bucket changed during the test (%d to %d)", bucket, after)
	}
	if !errors.Is(err, repo.ErrUnavailable) || !strings.Contains(err.Error(), "READONLY") {
		t.Fatalf("retry on the demoted master of an id its previous bucket holds: %+v %v, want ErrUnavailable naming READONLY", res, err)
	}
}

// The same for a degraded publish (degrade.lua): on a demoted master an id
// its previous bucket's stale set holds is not answered "already
// published" (which Go answers duplicate); the call fails READONLY.
func TestDegradedPublishOnADemotedMasterOfAnIDOfThePreviousBucketIsNotADuplicate(t *testing.T) {
	const bucketMs = 10_000
	ctx := context.Background()
	rdb := testredis.Start(t, testredis.Options{}).Client()
	r, _ := subscribedRepoNoGroups(t, rdb)
	c := contribution(8192*3+5, "k0", base)
	bucket := seedPreviousBucket(t, rdb, r, c, bucketMs)
	demote(t, rdb)
	known, err := repo.PublishSingles(ctx, r, []*combo.Contribution{c})
	if after := redisNowMs(t, rdb) / bucketMs; after != bucket {
		t.Fatalf("the bucket changed during the test (%d to %d)", bucket, after)
	}
	if !errors.Is(err, repo.ErrUnavailable) || !strings.Contains(err.Error(), "READONLY") {
		t.Fatalf("degraded publish on the demoted master of an id its previous bucket holds: %v %v, want ErrUnavailable naming READONLY", known, err)
	}
}

// seedPreviousBucket remembers c's id (shard 0) in the dedupe set of the
// bucket before Redis's current one, as report.lua leaves it
// (combo:{0}:s:<bucket>:<id mod 8192>, holding the id and "0"), and
// answers the current bucket. It first waits out a bucket about to end,
// so that the script's bucket is the one seeded after.
func seedPreviousBucket(t *testing.T, rdb redis.UniversalClient, r *repo.Repo, c *combo.Contribution, bucketMs int64) int64 {
	t.Helper()
	ctx := context.Background()
	now := redisNowMs(t, rdb)
	if into := now % bucketMs; into > bucketMs-2000 {
		time.Sleep(time.Duration(bucketMs-into+100) * time.Millisecond)
		now = redisNowMs(t, rdb)
	}
	bucket := now / bucketMs
	prev := r.Keys().SeenPrefix(0) + strconv.FormatInt(bucket-1, 10) + ":" + strconv.FormatInt(c.Id%8192, 10)
	if err := rdb.SAdd(ctx, prev, strconv.FormatInt(c.Id, 10), "0").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Expire(ctx, prev, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	return bucket
}
