package repo_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/combo-service/combo-service/internal/testredis"
	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/push"
	"github.com/combo-service/combo-service/repo"
)

// boundedRepo is subscribedRepoNoGroups with redis.stream_maxlen = maxLen.
func boundedRepo(t *testing.T, rdb redis.UniversalClient, maxLen int64) (*repo.Repo, *redis.PubSub) {
	t.Helper()
	s := settings()
	s.StreamMaxLen = maxLen
	return subscribedRepoWith(t, rdb, s)
}

// A stream that holds redis.stream_maxlen windows takes no more: a report
// that would open one is published on its own (degraded), so nothing
// acknowledged into a window is ever trimmed away unpublished; its id is
// then remembered, so a retry of it is a duplicate and is not pushed
// again. Joins need no new entry and go on.
func TestFullStreamOpensNoWindow(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		r, sub := boundedRepo(t, rdb, 3)
		cs := make([]*combo.Contribution, 5)
		for i := range cs {
			cs[i] = contribution(int64(100+i), fmt.Sprint("k", i), base)
		}
		res, err := r.Report(ctx, cs)
		if err != nil {
			t.Fatal(err)
		}
		for i, rr := range res {
			want := repo.Opened
			if i >= 3 {
				want = repo.Degraded
				// The same cause on both backends, no Lua position first.
				if c := fmt.Sprint(rr.Cause); !strings.HasPrefix(c, "report script: STREAMFULL ") {
					t.Errorf("report %d: cause %q, want report script: STREAMFULL ...", i, c)
				}
			}
			if rr.Outcome != want {
				t.Errorf("report %d: outcome %d, want %d", i, rr.Outcome, want)
			}
		}
		if n := rdb.XLen(ctx, r.Keys().Stream(0)).Val(); n != 3 {
			t.Fatalf("stream holds %d entries, want 3: nothing trimmed, nothing past the bound", n)
		}
		for _, id := range []int64{103, 104} {
			msg, err := receive(ctx, sub)
			if err != nil {
				t.Fatal(err)
			}
			if m, err := push.Decode([]byte(msg.Payload)); err != nil || m.Record.ID != id {
				t.Fatalf("push %q, want report %d on its own", msg.Payload, id)
			}
		}
		// A join needs no entry, also after a report of its call failed;
		// a retry of a degraded report is a duplicate (its id was
		// remembered once it was published) and is not pushed again.
		// (Before, the id was forgotten: each retry was pushed again.)
		res, err = r.Report(ctx, []*combo.Contribution{cs[3], contribution(200, "k0", base+1), cs[4], contribution(201, "k1", base+1)})
		if err != nil || res[0].Outcome != repo.Duplicate || res[1].Outcome != repo.Joined || res[1].WindowQuantity != 2 ||
			res[2].Outcome != repo.Duplicate || res[3].Outcome != repo.Joined || res[3].WindowQuantity != 2 {
			t.Fatalf("retries and joins at the bound: %+v %v, want duplicate, joined ×2, duplicate, joined ×2", res, err)
		}
		expectNoMorePushes(t, rdb, sub)
	})
}

// expectNoMorePushes publishes a marker on activity 7's channel and fails
// unless it is the next message sub receives.
func expectNoMorePushes(t *testing.T, rdb redis.UniversalClient, sub *redis.PubSub) {
	t.Helper()
	ctx := context.Background()
	if err := rdb.Publish(ctx, push.Channel(7), "marker").Err(); err != nil {
		t.Fatal(err)
	}
	if msg, err := receive(ctx, sub); err != nil || msg.Payload != "marker" {
		t.Fatalf("got %v %v before the marker: a report was pushed again", msg, err)
	}
}

// A degraded report's id is remembered only once it is published: while
// its PUBLISH is refused (here the Redis user may publish on no channel),
// the call fails and its id stays unknown, so the report sent again is
// published then; sent once more, it is a duplicate and is not pushed.
func TestDegradedIDIsRememberedOnlyOncePublished(t *testing.T) {
	ctx := context.Background()
	srv := testredis.Start(t, testredis.Options{})
	admin := srv.Client()
	acl := func(rules ...any) {
		t.Helper()
		if err := admin.Do(ctx, append([]any{"ACL", "SETUSER", "combo"}, rules...)...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	acl("reset", "on", ">pw", "~*", "&*", "+@all")
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: "combo", Password: "pw", MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	s := settings()
	s.StreamMaxLen = 1
	r := repo.New(rdb, s)
	if err := r.LoadScripts(ctx); err != nil {
		t.Fatal(err)
	}
	sub := admin.Subscribe(ctx, push.Channel(7))
	t.Cleanup(func() { sub.Close() })
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	if res, err := r.Report(ctx, []*combo.Contribution{contribution(1, "k0", base)}); err != nil || res[0].Outcome != repo.Opened {
		t.Fatalf("filling the stream: %+v %v", res, err)
	}

	c := contribution(2, "k1", base) // degrades: the stream is full
	acl("resetchannels")
	if res, err := r.Report(ctx, []*combo.Contribution{c}); err == nil || !strings.Contains(err.Error(), "degraded publish failed") {
		t.Fatalf("degraded report whose PUBLISH is refused: %+v %v, want the publish's failure", res, err)
	}
	acl("&*")
	if res, err := r.Report(ctx, []*combo.Contribution{c}); err != nil || res[0].Outcome != repo.Degraded {
		t.Fatalf("sent again once it may be published: %+v %v, want degraded (its id was not remembered)", res, err)
	}
	if msg, err := receive(ctx, sub); err != nil {
		t.Fatal(err)
	} else if m, err := push.Decode([]byte(msg.Payload)); err != nil || m.Record.ID != 2 {
		t.Fatalf("push %q, want report 2 on its own", msg.Payload)
	}
	if res, err := r.Report(ctx, []*combo.Contribution{c}); err != nil || res[0].Outcome != repo.Duplicate {
		t.Fatalf("sent once more: %+v %v, want a duplicate", res, err)
	}
	expectNoMorePushes(t, admin, sub)
}

// One id twice in a call at a full stream (a batch that repeats it, or a
// retry coalesced with its original): the script forgets the id after the
// first copy fails, so both copies fail; the contribution is published
// once, the first copy answered degraded and the second duplicate, as
// the script answers a repeated id (both were answered degraded, "pushed
// on its own", for one push).
func TestSameIDTwiceAtAFullStreamIsPublishedOnce(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		r, sub := boundedRepo(t, rdb, 1)
		if res, err := r.Report(ctx, []*combo.Contribution{contribution(1, "k0", base)}); err != nil || res[0].Outcome != repo.Opened {
			t.Fatalf("filling the stream: %+v %v", res, err)
		}
		c := contribution(2, "k1", base)
		res, err := r.Report(ctx, []*combo.Contribution{c, c})
		if err != nil || res[0].Outcome != repo.Degraded || res[1].Outcome != repo.Duplicate {
			t.Fatalf("one id twice at a full stream: %+v %v, want degraded, then duplicate", res, err)
		}
		if err := rdb.Publish(ctx, push.Channel(7), "sentinel").Err(); err != nil {
			t.Fatal(err)
		}
		n := 0
		for {
			msg, err := receive(ctx, sub)
			if err != nil {
				t.Fatal(err)
			}
			if msg.Payload == "sentinel" {
				break
			}
			n++
		}
		if n != 1 {
			t.Fatalf("published %d times, want once", n)
		}
	})
}

// A dedupe set first made by a report that runs after another report of
// its call failed still gets its expiry: the loop resumes after a failure
// in a fresh run of the reports, and the expiry is only set when SADD
// creates the set, so a set made then without one would never go away.
func TestDedupeSetMadeAfterAFailureExpires(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		s := settings()
		s.StreamMaxLen = 1
		r, _ := subscribedRepoWith(t, rdb, s)
		// Ids 1..5 fall in 5 different dedupe sets, each made by its
		// report: 2 and 4 fail (a full stream), 3 and 5 run after them.
		cs := []*combo.Contribution{contribution(1, "k0", base), contribution(2, "k1", base),
			contribution(3, "k0", base+1), contribution(4, "k2", base), contribution(5, "k0", base+2)}
		res, err := r.Report(ctx, cs)
		if err != nil {
			t.Fatal(err)
		}
		want := []repo.ReportOutcome{repo.Opened, repo.Degraded, repo.Joined, repo.Degraded, repo.Joined}
		for i, rr := range res {
			if rr.Outcome != want[i] {
				t.Fatalf("report %d: outcome %d, want %d (%+v)", i, rr.Outcome, want[i], res)
			}
		}
		keys := rdb.Keys(ctx, r.Keys().SeenPrefix(0)+"*").Val()
		if len(keys) != len(cs) {
			t.Fatalf("dedupe sets %v, want %d", keys, len(cs))
		}
		for _, k := range keys {
			if ttl := rdb.PTTL(ctx, k).Val(); ttl <= 0 || ttl > 2*s.Dedupe+2*time.Second {
				t.Errorf("dedupe set %s expires in %v, want within 2 buckets", k, ttl)
			}
		}
	})
}

// A degraded publish that makes its id's dedupe set (the dedupe bucket
// turned between the report's script and it) gives the set the report
// script's expiry: a set without one would never go away.
func TestDegradedPublishMakesAnExpiringDedupeSet(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		r, sub := subscribedRepo(t, rdb)
		c := contribution(5, "k0", base)
		if _, err := repo.PublishSingles(ctx, r, []*combo.Contribution{c}); err != nil {
			t.Fatal(err)
		}
		if msg, err := receive(ctx, sub); err != nil {
			t.Fatal(err)
		} else if m, err := push.Decode([]byte(msg.Payload)); err != nil || m.Record.ID != 5 {
			t.Fatalf("push %q, want report 5 on its own", msg.Payload)
		}
		keys := rdb.Keys(ctx, r.Keys().SeenPrefix(0)+"*").Val()
		if len(keys) != 1 {
			t.Fatalf("dedupe sets %v, want 1", keys)
		}
		if ttl := rdb.PTTL(ctx, keys[0]).Val(); ttl <= 0 || ttl > 2*settings().Dedupe+2*time.Second {
			t.Errorf("dedupe set %s expires in %v, want within 2 buckets", keys[0], ttl)
		}
		if res, err := r.Report(ctx, []*combo.Contribution{c}); err != nil || res[0].Outcome != repo.Duplicate {
			t.Fatalf("the published report sent again: %+v %v, want a duplicate", res, err)
		}
		// Published again on its own: not, since its id is known.
		if known, err := repo.PublishSingles(ctx, r, []*combo.Contribution{c}); err != nil || !known[5] {
			t.Fatalf("degraded publish of a known id: %v %v, want it known and not published", known, err)
		}
		expectNoMorePushes(t, rdb, sub)
	})
}

// Drop acknowledges and deletes entries together, however many: 9000 ids
// (more than Lua's unpack takes at once, 8000 in Redis) read into a
// consumer's pending list leave neither an entry nor a pending one.
func TestDropAcknowledgesAndDeletesEveryEntry(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		r, _ := subscribedRepo(t, rdb)
		stream := r.Keys().Stream(0)
		pipe := rdb.Pipeline()
		adds := make([]*redis.StringCmd, 9000)
		for i := range adds {
			adds[i] = pipe.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"bad", i}})
		}
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
		ids := make([]string, len(adds))
		for i, a := range adds {
			ids[i] = a.Val()
		}
		if err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: repo.Group, Consumer: "c1",
			Streams: []string{stream, ">"}, Count: int64(len(ids))}).Err(); err != nil {
			t.Fatal(err)
		}
		if err := r.Drop(ctx, 0, ids); err != nil {
			t.Fatal(err)
		}
		if n := rdb.XLen(ctx, stream).Val(); n != 0 {
			t.Errorf("%d entries left in the stream, want 0", n)
		}
		if p := rdb.XPending(ctx, stream, repo.Group).Val(); p.Count != 0 {
			t.Errorf("%d entries left pending, want 0", p.Count)
		}
	})
}

// A report refused at a full stream leaves its key's open window where it
// was: a script's commands are not undone when it then fails, and the
// window was once parked (renamed aside) before the stream's length was
// read, so the key's next report, dated within that window, opened one of
// its own (refused too: published alone, a second feed item for one
// combo) instead of joining it.
func TestReportRefusedAtAFullStreamLeavesItsKeysWindowOpen(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		r, sub := boundedRepo(t, rdb, 1)
		if res, err := r.Report(ctx, []*combo.Contribution{contribution(1, "k0", base)}); err != nil || res[0].Outcome != repo.Opened {
			t.Fatalf("filling the stream: %+v %v", res, err)
		}
		w := settings().Window.Milliseconds()
		// Dated past the open window's W: it would open the key's next
		// window, and the stream has no room for it.
		if res, err := r.Report(ctx, []*combo.Contribution{contribution(2, "k0", base+w)}); err != nil || res[0].Outcome != repo.Degraded {
			t.Fatalf("a report past W at a full stream: %+v %v, want degraded", res, err)
		}
		// Dated within the first window, which is not published yet.
		res, err := r.Report(ctx, []*combo.Contribution{contribution(3, "k0", base+w/2)})
		if err != nil || res[0].Outcome != repo.Joined || res[0].WindowID != 1 || res[0].WindowQuantity != 2 {
			t.Fatalf("a report within the open window after one was refused: %+v %v, want joined window 1 ×2", res, err)
		}
		if msg, err := receive(ctx, sub); err != nil {
			t.Fatal(err)
		} else if m, err := push.Decode([]byte(msg.Payload)); err != nil || m.Record.ID != 2 {
			t.Fatalf("push %q, want report 2 on its own", msg.Payload)
		}
		expectNoMorePushes(t, rdb, sub)
	})
}

// A degraded report's id is remembered in its own shard's dedupe sets,
// where the report script looks for it: sent again once its shard's
// stream has room (its caller's answer lost, say), it is a duplicate, not
// counted into a window that would push it a second time. Shard 0 would
// hide a mix-up of shards, so the report is on another.
func TestDegradedIDOnAnotherShardIsADuplicateOnceItsStreamHasRoom(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		s := settings()
		s.Shards, s.StreamMaxLen = 4, 1
		r, sub := subscribedRepoWith(t, rdb, s)
		types, shard := typesOnOneShard(r.Keys(), 2)
		if res, err := r.Report(ctx, []*combo.Contribution{contribution(1, types[0], base)}); err != nil || res[0].Outcome != repo.Opened {
			t.Fatalf("filling shard %d's stream: %+v %v", shard, res, err)
		}
		c := contribution(2, types[1], base)
		if res, err := r.Report(ctx, []*combo.Contribution{c}); err != nil || res[0].Outcome != repo.Degraded {
			t.Fatalf("report at a full stream: %+v %v, want degraded", res, err)
		}
		if msg, err := receive(ctx, sub); err != nil {
			t.Fatal(err)
		} else if m, err := push.Decode([]byte(msg.Payload)); err != nil || m.Record.ID != 2 {
			t.Fatalf("push %q, want report 2 on its own", msg.Payload)
		}
		entries, err := rdb.XRange(ctx, r.Keys().Stream(shard), "-", "+").Result()
		if err != nil || len(entries) != 1 {
			t.Fatalf("shard %d's stream: %v %v, want the one window", shard, entries, err)
		}
		if err := r.Drop(ctx, shard, []string{entries[0].ID}); err != nil {
			t.Fatal(err)
		}
		if res, err := r.Report(ctx, []*combo.Contribution{c}); err != nil || res[0].Outcome != repo.Duplicate {
			t.Fatalf("sent again once its stream has room: %+v %v, want a duplicate", res, err)
		}
		expectNoMorePushes(t, rdb, sub)
	})
}

// A degraded publish whose script Redis no longer has (SCRIPT FLUSH, a
// restart, a failover to a replica with an empty script cache) sends it
// again with EVAL and publishes the report: NOSCRIPT says nothing ran.
// Left failed, every degraded report failed until the service restarted.
func TestDegradedPublishReloadsALostScript(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		r, sub := boundedRepo(t, rdb, 1)
		if res, err := r.Report(ctx, []*combo.Contribution{contribution(1, "k0", base)}); err != nil || res[0].Outcome != repo.Opened {
			t.Fatalf("filling the stream: %+v %v", res, err)
		}
		if err := rdb.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if res, err := r.Report(ctx, []*combo.Contribution{contribution(2, "k1", base)}); err != nil || res[0].Outcome != repo.Degraded {
			t.Fatalf("report at a full stream after SCRIPT FLUSH: %+v %v, want degraded", res, err)
		}
		if msg, err := receive(ctx, sub); err != nil {
			t.Fatal(err)
		} else if m, err := push.Decode([]byte(msg.Payload)); err != nil || m.Record.ID != 2 {
			t.Fatalf("push %q, want report 2 on its own", msg.Payload)
		}
	})
}
