package repo_test

import (
	"context"
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
