package repo_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/combo-service/combo-service/internal/testredis"
	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/push"
	"github.com/combo-service/combo-service/repo"
)

const base = int64(1732950000000)

func settings() repo.Settings {
	return repo.Settings{Window: 200 * time.Millisecond, Grace: 50 * time.Millisecond, Dedupe: 10 * time.Second,
		Stale: 10 * time.Second, Timeout: time.Second, Shards: 1, StreamMaxLen: 100000}
}

func contribution(id int64, itemType string, createdAt int64) *combo.Contribution {
	return &combo.Contribution{Id: id, ActivityId: 7, UserId: 42, ItemId: 3, ItemType: itemType, ItemName: "烟花",
		Nickname: "小明", Quantity: 1, CreatedAt: createdAt}
}

// backends runs fn against a real redis-server and the embedded miniredis,
// since the service runs on both.
func backends(t *testing.T, fn func(t *testing.T, rdb redis.UniversalClient)) {
	t.Run("redis-server", func(t *testing.T) { fn(t, serviceLikeClient(t, testredis.Start(t, testredis.Options{}).Addr)) })
	t.Run("miniredis", func(t *testing.T) { fn(t, serviceLikeClient(t, miniredis.RunT(t).Addr())) })
}

// receive waits for sub's next message, for 10 s at most: a push the code
// under test never sends must fail its own test, not hang the package
// until go test's 10-minute timeout (whose panic loses every later
// test's result).
func receive(ctx context.Context, sub *redis.PubSub) (*redis.Message, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return sub.ReceiveMessage(ctx)
}

// serviceLikeClient is a client that, like the service's (redisclient.go's
// openRedis), never sends a command again by itself and times out by the
// repo's contexts. go-redis's defaults resent a whole pipeline of report
// scripts whose reply took over its 3 s read timeout (miniredis under
// load): the scripts had run, and the second run answered "duplicate".
// The read timeout is only a backstop above every test's redis.timeout.
func serviceLikeClient(t *testing.T, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true,
		ReadTimeout: time.Minute, WriteTimeout: time.Minute})
	t.Cleanup(func() { c.Close() })
	return c
}

// subscribedRepo is a repo with its scripts loaded and consumer group
// created, and a subscription to activity 7's channel (closed at the end).
func subscribedRepo(t *testing.T, rdb redis.UniversalClient) (*repo.Repo, *redis.PubSub) {
	t.Helper()
	return subscribedRepoWithGroups(t, rdb, settings())
}

// subscribedRepoWithGroups is subscribedRepo with settings s.
func subscribedRepoWithGroups(t *testing.T, rdb redis.UniversalClient, s repo.Settings) (*repo.Repo, *redis.PubSub) {
	t.Helper()
	r, sub := subscribedRepoWith(t, rdb, s)
	if err := r.EnsureGroups(context.Background()); err != nil {
		t.Fatal(err)
	}
	return r, sub
}

// subscribedRepoNoGroups is subscribedRepo without the consumer group,
// which is a write (a replica refuses it).
func subscribedRepoNoGroups(t *testing.T, rdb redis.UniversalClient) (*repo.Repo, *redis.PubSub) {
	t.Helper()
	return subscribedRepoWith(t, rdb, settings())
}

// subscribedRepoWith is subscribedRepoNoGroups with settings s.
func subscribedRepoWith(t *testing.T, rdb redis.UniversalClient, s repo.Settings) (*repo.Repo, *redis.PubSub) {
	t.Helper()
	ctx := context.Background()
	r := repo.New(rdb, s)
	if err := r.LoadScripts(ctx); err != nil {
		t.Fatal(err)
	}
	sub := rdb.Subscribe(ctx, push.Channel(7))
	t.Cleanup(func() { sub.Close() })
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	return r, sub
}

// typesOnOneShard returns n item types whose combo keys (activity 7,
// user 42) fall on one shard of keys other than 0, and that shard: a
// report placed on shard 0 hides a key built on the wrong shard.
func typesOnOneShard(keys repo.Keys, n int) ([]string, int) {
	var types []string
	shard := 0
	for i := 0; len(types) < n; i++ {
		typ := fmt.Sprint("k", i)
		switch sh := keys.Shard(7, 42, typ); {
		case sh == 0:
		case len(types) == 0:
			types, shard = append(types, typ), sh
		case sh == shard:
			types = append(types, typ)
		}
	}
	return types, shard
}

// A window displaced (parked) by a newer one of its combo key before its
// flush is published all the same, with the newer one, on a shard other
// than 0: its flush finds it where the report script parked it, under
// its own shard's tag, not lost.
func TestDisplacedWindowOnAnotherShardIsPublished(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		s := settings()
		s.Shards = 4
		r, sub := subscribedRepoWithGroups(t, rdb, s)
		types, shard := typesOnOneShard(r.Keys(), 1)
		for i, c := range []*combo.Contribution{contribution(10, types[0], base), contribution(20, types[0], base+s.Window.Milliseconds())} {
			if res, err := r.Report(ctx, []*combo.Contribution{c}); err != nil || res[0].Outcome != repo.Opened {
				t.Fatalf("report %d: %+v %v, want it to open a window", i, res, err)
			}
		}
		ws, bad, _, err := r.Read(ctx, shard, "c1", ">", 10, -1)
		if err != nil || len(ws) != 2 || len(bad) != 0 {
			t.Fatalf("read shard %d: %+v %v %v, want two windows", shard, ws, bad, err)
		}
		untilDue(t, r, ws[1:]) // the later one
		fr, err := r.Flush(ctx, ws)
		if err != nil || fr[0].Status != repo.Published || fr[1].Status != repo.Published {
			t.Fatalf("flush of the displaced window and its successor: %+v %v, want both published", fr, err)
		}
		for _, id := range []int64{10, 20} {
			msg, err := receive(ctx, sub)
			if err != nil {
				t.Fatal(err)
			}
			if m, err := push.Decode([]byte(msg.Payload)); err != nil || m.Record.ID != id || m.Record.Quantity != 1 {
				t.Fatalf("push %q, want report %d's window", msg.Payload, id)
			}
		}
	})
}

func TestReportThenFlush(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		r, sub := subscribedRepo(t, rdb)
		big := int64(math.MaxInt64 - 10)
		res, err := r.Report(ctx, []*combo.Contribution{
			contribution(big, "a:{b} 烟花", base+100), contribution(big-1, "a:{b} 烟花", base+150), contribution(big, "a:{b} 烟花", base+100),
		})
		if err != nil {
			t.Fatal(err)
		}
		want := []repo.ReportResult{{repo.Opened, big, 1, nil}, {repo.Joined, big - 1, 2, nil}, {repo.Duplicate, 0, 0, nil}}
		for i := range want {
			if res[i] != want[i] {
				t.Fatalf("result %d = %+v, want %+v", i, res[i], want[i])
			}
		}
		ws, bad, _, err := r.Read(ctx, 0, "c1", ">", 10, 100*time.Millisecond)
		if err != nil || len(bad) != 0 || len(ws) != 1 {
			t.Fatalf("read: %v %v %v", ws, bad, err)
		}
		// Before due the flush is early and changes nothing. Flushed by a
		// repo whose W is an hour, it is surely before due: with r's
		// 250 ms, a busy CI host that stalled this test for longer between
		// the report and the flush made it published.
		s := settings()
		s.Window, s.Stale = time.Hour, 2*time.Hour
		fr, err := repo.New(rdb, s).Flush(ctx, ws)
		if err != nil {
			t.Fatal(err)
		}
		if fr[0].Status != repo.Early || fr[0].Due != ws[0].Due+(s.Window-settings().Window).Milliseconds() || fr[0].Now >= fr[0].Due {
			t.Fatalf("flush before due must be early, got %+v", fr[0])
		}
		untilDue(t, r, ws)
		fr, err = r.Flush(ctx, ws)
		if err != nil || fr[0].Status != repo.Published || fr[0].Quantity != 2 {
			t.Fatalf("flush: %+v %v", fr, err)
		}
		msg, err := receive(ctx, sub)
		if err != nil {
			t.Fatal(err)
		}
		m, err := push.Decode([]byte(msg.Payload))
		if err != nil {
			t.Fatal(err)
		}
		if m.Record.ID != big-1 || m.Record.Quantity != 2 || m.Record.ComboCount != 2 || m.Record.CreatedAt != base+100 ||
			m.Record.ItemType != "a:{b} 烟花" || m.Type != push.Type || m.ActivityID != 7 || !strings.Contains(msg.Payload, "9223372036854775796") {
			t.Fatalf("payload %s", msg.Payload)
		}
		fr, err = r.Flush(ctx, ws)
		if err != nil || fr[0].Status != repo.Gone {
			t.Fatalf("second flush must be gone: %+v %v", fr, err)
		}
		if n := rdb.XLen(ctx, r.Keys().Stream(0)).Val(); n != 0 {
			t.Fatalf("stream holds %d entries after the flush", n)
		}
	})
}

func TestUnavailable(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	defer rdb.Close()
	s := settings()
	r := repo.New(rdb, s)
	start := time.Now()
	_, err := r.Report(context.Background(), []*combo.Contribution{contribution(1, "x", base)})
	if !errors.Is(err, repo.ErrUnavailable) {
		t.Fatalf("want ErrUnavailable, got %v", err)
	}
	// Within the one redis.timeout its pipeline is given, with a margin:
	// go-redis redials a refused address for about 0.8 s, so a bound of
	// the timeout itself (1 s) failed on a loaded host at 1.0004 s.
	if took := time.Since(start); took > s.Timeout+s.Timeout/2 {
		t.Fatalf("took %s, want within redis.timeout (%s)", took, s.Timeout)
	}
}

// Real Redis only: miniredis does not track consumer idle time for every
// command, and the embedded mode never has dead replicas to prune.
// On a new Redis the housekeeper may run before the shard's reader has
// made the stream: there is nobody to remove, and no error (it once
// answered "ERR no such key", logged and counted as a Redis error, at a
// normal start).
func TestPruneConsumersBeforeTheStreamExists(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		removed, err := repo.New(rdb, settings()).PruneConsumers(context.Background(), 0, "me", time.Hour)
		if err != nil || len(removed) != 0 {
			t.Fatalf("PruneConsumers with no stream yet: %v, %v; want nothing and no error", removed, err)
		}
	})
}

// consumersOneBusy is a repo with one entry in shard 0's stream, read by
// consumer "busy", and the consumers others with nothing pending, all idle
// more than 10 ms.
func consumersOneBusy(t *testing.T, others ...string) *repo.Repo {
	t.Helper()
	rdb := testredis.Start(t, testredis.Options{}).Client()
	ctx := context.Background()
	r := repo.New(rdb, settings())
	if err := r.EnsureGroups(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Report(ctx, []*combo.Contribution{contribution(1, "x", base)}); err != nil {
		t.Fatal(err)
	}
	if ws, _, _, err := r.Read(ctx, 0, "busy", ">", 10, -1); err != nil || len(ws) != 1 {
		t.Fatalf("read: %v %v", ws, err)
	}
	for _, c := range others {
		if err := rdb.XGroupCreateConsumer(ctx, r.Keys().Stream(0), repo.Group, c).Err(); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(20 * time.Millisecond) // let them be idle > 10ms
	return r
}

func TestPruneConsumersKeepsPending(t *testing.T) {
	ctx := context.Background()
	r := consumersOneBusy(t, "idle", "me") // "me" is ourselves
	removed, err := r.PruneConsumers(ctx, 0, "me", 10*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) != 1 || removed[0] != "idle" {
		t.Fatalf("removed %v, want [idle]", removed)
	}
	st, err := r.StreamStats(ctx, 0)
	if err != nil || st.Length != 1 || st.Pending != 1 {
		t.Fatalf("stats %d %d %v", st.Length, st.Pending, err)
	}
}

// The prune script checks again, in one step with the deletion, what
// PruneConsumers read before it: a consumer that read entries meanwhile
// (a replica restarting under the same name) has pending entries, which
// XGROUP DELCONSUMER would drop, their windows then never claimed nor
// published; one seen since is not idle enough. The Go check before it
// hid either check's loss from every other test.
func TestPruneScriptChecksAgain(t *testing.T) {
	ctx := context.Background()
	r := consumersOneBusy(t, "idle", "fresh")
	for _, c := range []struct {
		name string
		idle time.Duration
		want int
	}{
		{"busy", 10 * time.Millisecond, 0},   // idle enough, but an entry pending
		{"fresh", time.Hour, 0},              // nothing pending, not idle an hour
		{"idle", 10 * time.Millisecond, 1},   // nothing pending, idle enough
		{"nobody", 10 * time.Millisecond, 0}, // no such consumer
	} {
		if n, err := repo.PruneOne(ctx, r, 0, c.name, c.idle); err != nil || n != c.want {
			t.Errorf("prune script on %q (idle bound %s): %d %v, want %d", c.name, c.idle, n, err, c.want)
		}
	}
	if st, err := r.StreamStats(ctx, 0); err != nil || st.Pending != 1 {
		t.Fatalf("pending %d %v, want busy's entry still pending", st.Pending, err)
	}
}

// staleRepo is a repo whose windows are stale after 300 ms, with its
// consumer groups created.
func staleRepo(t *testing.T, rdb redis.UniversalClient) (repo.Settings, *repo.Repo) {
	t.Helper()
	s := settings()
	s.Stale = 300 * time.Millisecond
	r := repo.New(rdb, s)
	if err := r.EnsureGroups(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s, r
}

// Past window.stale, an entry whose window another consumer published is
// gone; one whose window still holds its data is stale, its quantity read;
// one whose data was deleted (evicted) though it could not have expired yet
// is lost, however late the flush comes (a backlog, an outage): counted
// stale, an eviction would never show as one.
func TestFlushPastStaleTellsDeletedFromExpired(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		s, r := staleRepo(t, rdb)
		ws := openWindows(t, r, 2)
		// Window 1: its data deleted while its entry waits.
		if n, err := rdb.Del(ctx, r.Keys().Current(0, 7, 42, "t1")).Result(); err != nil || n != 1 {
			t.Fatalf("DEL of window 1's data: %d %v, want 1: the test did not test", n, err)
		}
		for _, w := range ws {
			untilStale(t, r, w, s.Stale)
		}
		res, err := r.Flush(ctx, ws)
		if err != nil {
			t.Fatal(err)
		}
		if res[0].Status != repo.Lost || res[0].Quantity != 0 || res[1].Status != repo.Stale || res[1].Quantity != 1 {
			t.Fatalf("results %+v, want window 1 lost and window 2 stale with its quantity 1", res)
		}
		// Flushing the same entries again (as a consumer that lost a race
		// would): both already retired, so gone.
		res, err = r.Flush(ctx, ws)
		if err != nil || res[0].Status != repo.Gone || res[1].Status != repo.Gone {
			t.Fatalf("second flush %+v %v", res, err)
		}
	})
}

// openWindows reports n gifts of activity 7's user 42, of item types t1
// to tn, one window each, and reads their windows as consumer "c".
func openWindows(t *testing.T, r *repo.Repo, n int) []repo.Window {
	t.Helper()
	ctx := context.Background()
	for id := 1; id <= n; id++ {
		if _, err := r.Report(ctx, []*combo.Contribution{contribution(int64(id), fmt.Sprint("t", id), base)}); err != nil {
			t.Fatal(err)
		}
	}
	ws, _, _, err := r.Read(ctx, 0, "c", ">", 10, -1)
	if err != nil || len(ws) != n {
		t.Fatalf("read %v %v, want %d windows", ws, err, n)
	}
	return ws
}

// An entry whose window's data expired unpublished (its flush came after
// the data's TTL, window.stale + W + grace + 10 s) is stale, its quantity
// unknown, and retired; Retire finds it so too. Only the embedded Redis
// can move its clock that far ahead, TTLs with it.
func TestFlushTellsExpiredDataStale(t *testing.T) {
	m := miniredis.RunT(t)
	rdb := serviceLikeClient(t, m.Addr())
	ctx := context.Background()
	s, r := staleRepo(t, rdb)
	ws := openWindows(t, r, 2)
	ttl := s.Stale + s.Window + s.Grace + 10*time.Second
	m.SetTime(time.Now().Add(ttl + time.Second))
	m.FastForward(ttl + time.Second)
	if n := rdb.Exists(ctx, r.Keys().Current(0, 7, 42, "t1"), r.Keys().Current(0, 7, 42, "t2")).Val(); n != 0 {
		t.Fatalf("%d windows' data still there past their TTL: the test did not test", n)
	}
	res, err := r.Flush(ctx, ws[:1])
	if err != nil || res[0].Status != repo.Stale || res[0].Quantity != 0 {
		t.Fatalf("flush of a window whose data expired: %+v %v, want stale, quantity 0", res, err)
	}
	got, err := r.Retire(ctx, ws[1])
	if err != nil || got.Status != repo.Stale || got.Quantity != 0 {
		t.Fatalf("retire of a window whose data expired: %+v %v, want stale, quantity 0", got, err)
	}
	if n := rdb.XLen(ctx, r.Keys().Stream(0)).Val(); n != 0 {
		t.Fatalf("stream holds %d entries after both were retired", n)
	}
}

// A Redis that expires keys up to a tick early (the embedded one counts
// TTLs down a tick at a time: a key set just before a tick is charged the
// whole tick) says so in Settings.ExpiresEarly, and a window whose data it
// expired that early is stale, not lost: counted lost, it blamed an
// eviction and fired the critical alert. A Redis server, which never
// expires a key early, keeps the line at the TTL less repo.IDsAhead.
func TestFlushTellsDataExpiredEarlyStale(t *testing.T) {
	for _, tc := range []struct {
		early time.Duration
		want  repo.FlushStatus
	}{{time.Second, repo.Stale}, {0, repo.Lost}} {
		t.Run(fmt.Sprint("expires early ", tc.early), func(t *testing.T) {
			m := miniredis.RunT(t)
			rdb := serviceLikeClient(t, m.Addr())
			ctx := context.Background()
			s := settings()
			s.Stale, s.ExpiresEarly = 300*time.Millisecond, tc.early
			r := repo.New(rdb, s)
			if err := r.EnsureGroups(ctx); err != nil {
				t.Fatal(err)
			}
			opened := time.Now()
			m.SetTime(opened)
			ws := openWindows(t, r, 2)
			// The data's TTL charged in full while the clock reads half a
			// second short of the line, as a tick would.
			ttl := s.Stale + s.Window + s.Grace + 10*time.Second
			m.FastForward(ttl)
			m.SetTime(opened.Add(ttl - repo.IDsAhead - 500*time.Millisecond))
			if n := rdb.Exists(ctx, r.Keys().Current(0, 7, 42, "t1"), r.Keys().Current(0, 7, 42, "t2")).Val(); n != 0 {
				t.Fatal("the windows' data is still there: the test did not test")
			}
			res, err := r.Flush(ctx, ws[:1])
			if err != nil || res[0].Status != tc.want {
				t.Fatalf("flush %+v %v, want %v", res, err, tc.want)
			}
			if got, err := r.Retire(ctx, ws[1]); err != nil || got.Status != tc.want {
				t.Fatalf("retire %+v %v, want %v", got, err, tc.want)
			}
		})
	}
}

// Retire never publishes, and changes nothing until a window is stale;
// then it retires it as a flush would: its data deleted with its entry, so
// a later report of its combo key opens a new window rather than joining
// one no entry would ever push.
func TestRetireOnlyAStaleWindow(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		s, r := staleRepo(t, rdb)
		// Every channel: "*" does not match the empty one, which Retire
		// passes for the push's channel.
		sub := rdb.PSubscribe(ctx, "*")
		defer sub.Close()
		if err := sub.Subscribe(ctx, ""); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if _, err := sub.Receive(ctx); err != nil {
				t.Fatal(err)
			}
		}
		now := time.Now().UnixMilli()
		if _, err := r.Report(ctx, []*combo.Contribution{contribution(1, "rose", now)}); err != nil {
			t.Fatal(err)
		}
		ws, _, _, err := r.Read(ctx, 0, "c", ">", 10, -1)
		if err != nil || len(ws) != 1 {
			t.Fatalf("read %v %v", ws, err)
		}
		cur := r.Keys().Current(0, 7, 42, "rose")
		// Retired by a repo whose window.stale is an hour, it is surely
		// fresh: with r's 300 ms, a CI host that stalled this test for
		// longer since the report made it stale.
		fresh := s
		fresh.Stale = time.Hour
		if res, err := repo.New(rdb, fresh).Retire(ctx, ws[0]); err != nil || res.Status != repo.Kept {
			t.Fatalf("retire of a fresh window: %+v %v, want kept", res, err)
		}
		if rdb.Exists(ctx, cur).Val() != 1 || rdb.XLen(ctx, r.Keys().Stream(0)).Val() != 1 {
			t.Fatal("a kept window was changed")
		}
		untilStale(t, r, ws[0], s.Stale)
		res, err := r.Retire(ctx, ws[0])
		if err != nil || res.Status != repo.Stale || res.Quantity != 1 {
			t.Fatalf("retire of a stale window: %+v %v", res, err)
		}
		if rdb.Exists(ctx, cur).Val() != 0 || rdb.XLen(ctx, r.Keys().Stream(0)).Val() != 0 {
			t.Fatal("a retired window's data or entry is left")
		}
		if res, err := r.Retire(ctx, ws[0]); err != nil || res.Status != repo.Gone {
			t.Fatalf("retire again: %+v %v, want gone", res, err)
		}
		// Same created_at: it would have joined the old window.
		got, err := r.Report(ctx, []*combo.Contribution{contribution(2, "rose", now)})
		if err != nil || got[0].Outcome != repo.Opened {
			t.Fatalf("report after the retire: %+v %v, want a new window", got, err)
		}
		// Redis delivers in order: a push by a retire would come first.
		if err := rdb.Publish(ctx, push.Channel(7), "marker").Err(); err != nil {
			t.Fatal(err)
		}
		if msg, err := receive(ctx, sub); err != nil || msg.Payload != "marker" {
			t.Fatalf("retire published %v %v", msg, err)
		}
	})
}

// A window whose entry still waits but whose data is gone before
// window.stale (evicted, deleted by hand, or overwritten with another type
// by a foreign write under the prefix, which would otherwise fail every
// flush with WRONGTYPE, the window retried for ever) was never published:
// it is lost, not gone (already published elsewhere), and retired.
func TestFlushTellsLostFromGone(t *testing.T) {
	for name, damage := range map[string]func(ctx context.Context, rdb redis.UniversalClient, key string){
		"deleted": func(ctx context.Context, rdb redis.UniversalClient, key string) {
			rdb.Del(ctx, key) // as an eviction would
		},
		"another type": func(ctx context.Context, rdb redis.UniversalClient, key string) {
			rdb.Del(ctx, key)
			rdb.HSet(ctx, key, "foreign", "1")
		},
	} {
		t.Run(name, func(t *testing.T) {
			backends(t, func(t *testing.T, rdb redis.UniversalClient) {
				ctx := context.Background()
				r := repo.New(rdb, settings()) // stale 10 s
				if err := r.EnsureGroups(ctx); err != nil {
					t.Fatal(err)
				}
				if _, err := r.Report(ctx, []*combo.Contribution{contribution(1, "rose", base)}); err != nil {
					t.Fatal(err)
				}
				ws, _, _, err := r.Read(ctx, 0, "c", ">", 10, -1)
				if err != nil || len(ws) != 1 {
					t.Fatalf("read %v %v", ws, err)
				}
				damage(ctx, rdb, r.Keys().Current(0, 7, 42, "rose"))
				res, err := r.Flush(ctx, ws)
				if err != nil || res[0].Err != nil || res[0].Status != repo.Lost {
					t.Fatalf("flush of a window whose data is gone: %+v %v, want lost", res, err)
				}
				if n := rdb.XLen(ctx, r.Keys().Stream(0)).Val(); n != 0 {
					t.Fatalf("stream holds %d entries after the lost window, want it retired", n)
				}
				if res, err = r.Flush(ctx, ws); err != nil || res[0].Status != repo.Gone {
					t.Fatalf("second flush %+v %v, want gone", res, err)
				}
			})
		})
	}
}

// Concurrent calls share pipelines; each must get exactly its own answers.
// All report quantity 1 into one window, so the totals answered are a
// permutation of 1..n. ObservePipeline sees every report exactly once.
func TestConcurrentReportsShareCorrectly(t *testing.T) {
	rdb := testredis.Start(t, testredis.Options{}).Client()
	s := settings()
	s.Window = time.Minute
	var pipelines, observed atomic.Int64
	s.ObservePipeline = func(reports int, took time.Duration) {
		if reports < 1 || took <= 0 {
			t.Errorf("ObservePipeline(%d, %v): want at least one report and a positive duration", reports, took)
		}
		pipelines.Add(1)
		observed.Add(int64(reports))
	}
	r := repo.New(rdb, s)
	const callers, per = 32, 20
	var mu sync.Mutex
	seen := map[int32]bool{}
	var wg sync.WaitGroup
	for g := range callers {
		wg.Go(func() {
			for i := range per {
				c := contribution(int64(1+g*per+i), "x", base)
				res, err := r.Report(context.Background(), []*combo.Contribution{c})
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if seen[res[0].WindowQuantity] {
					t.Errorf("total %d answered twice", res[0].WindowQuantity)
				}
				seen[res[0].WindowQuantity] = true
				mu.Unlock()
				if res[0].WindowID != 1 && res[0].Outcome != repo.Opened {
					// The smallest id reported so far; id 1 may come late.
					if res[0].WindowID > c.Id {
						t.Errorf("window id %d above the reporter's own id %d", res[0].WindowID, c.Id)
					}
				}
			}
		})
	}
	wg.Wait()
	for q := int32(1); q <= callers*per; q++ {
		if !seen[q] {
			t.Fatalf("total %d never answered", q)
		}
	}
	if observed.Load() != callers*per {
		t.Errorf("ObservePipeline saw %d reports, want %d", observed.Load(), callers*per)
	}
	t.Logf("%d reports in %d pipelines", callers*per, pipelines.Load())
}

// Dedupe ids are spread over small sets, which Redis keeps as compact
// intsets and frees in one step when they expire.
func TestDedupeSetsStayCompact(t *testing.T) {
	rdb := testredis.Start(t, testredis.Options{}).Client()
	ctx := context.Background()
	// 400 reports are four script calls, each reading Redis's clock: hour
	// buckets, and not in a bucket's last seconds, keep them all in one.
	s := settings()
	s.Dedupe = time.Hour
	if left := 3600 - time.Now().Unix()%3600; left < 5 {
		time.Sleep(time.Duration(left)*time.Second + 100*time.Millisecond)
	}
	r := repo.New(rdb, s)
	cs := make([]*combo.Contribution, 1000)
	for i := range cs {
		cs[i] = contribution(int64(1_000_000_000_000+i*8192), fmt.Sprint("t", i), base) // all in one sub-set
	}
	if _, err := r.Report(ctx, cs[:400]); err != nil {
		t.Fatal(err)
	}
	keys := rdb.Keys(ctx, r.Keys().SeenPrefix(0)+"*").Val()
	if len(keys) != 1 {
		t.Fatalf("dedupe keys %v, want one sub-set", keys)
	}
	if enc := rdb.ObjectEncoding(ctx, keys[0]).Val(); enc != "intset" {
		t.Fatalf("encoding %s, want intset", enc)
	}
	if ttl := rdb.PTTL(ctx, keys[0]).Val(); ttl <= 0 {
		t.Fatalf("dedupe set has no expiry: %s", ttl)
	}
	res, err := r.Report(ctx, cs[:1])
	if err != nil || res[0].Outcome != repo.Duplicate {
		t.Fatalf("dedupe lost: %+v %v", res, err)
	}
}

// TestWindowRecordUpdates covers every way a join changes a window's record
// besides adding to its total (see report.lua): an earlier created_at, a
// smaller id (whose display fields then win), a total that needs more
// digits than the record holds, and a total that would pass int32, which
// opens a new window instead.
func TestWindowRecordUpdates(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		// One call of 2,148 reports takes miniredis's Lua close to the
		// default 1 s redis.timeout under -race on a busy machine; this
		// test is about the record, not the timeout.
		st := settings()
		st.Timeout = 30 * time.Second
		// And a window may then be older than settings' 10 s stale when it
		// is flushed: dropped stale, it answered Gone on the next flush,
		// which the loop below took for published, and the wait for its
		// push hung until go test's 10-minute limit.
		st.Stale = 5 * time.Minute
		r, sub := subscribedRepoWithGroups(t, rdb, st)
		c := func(id, createdAt int64, quantity int32, nickname string) *combo.Contribution {
			x := contribution(id, "rose", createdAt)
			x.Quantity, x.Nickname = quantity, nickname
			return x
		}
		steps := []struct {
			c    *combo.Contribution
			want repo.ReportResult
		}{
			{c(100, base+100, 5000, "first"), repo.ReportResult{repo.Opened, 100, 5000, nil}},
			{c(101, base+50, 4999, "earlier"), repo.ReportResult{repo.Joined, 100, 9999, nil}},
			{c(102, base+60, 1, "widens"), repo.ReportResult{repo.Joined, 100, 10000, nil}},
			{c(99, base+120, 3, "smallest"), repo.ReportResult{repo.Joined, 99, 10003, nil}},
			{c(103, base+130, 1_000_000, "big"), repo.ReportResult{repo.Joined, 99, 1_010_003, nil}},
		}
		for i, s := range steps {
			res, err := r.Report(ctx, []*combo.Contribution{s.c})
			if err != nil || res[0] != s.want {
				t.Fatalf("step %d: %+v %v, want %+v", i, res, err, s.want)
			}
		}
		// 2146 more reports of 1,000,000 reach 2,147,010,003; the next
		// would pass int32 and opens a window of its own.
		var fill []*combo.Contribution
		for i := range 2147 {
			fill = append(fill, c(1000+int64(i), base+140, 1_000_000, "fill"))
		}
		res, err := r.Report(ctx, fill)
		if err != nil {
			t.Fatal(err)
		}
		if last := res[2145]; last != (repo.ReportResult{repo.Joined, 99, 2_147_010_003, nil}) {
			t.Fatalf("last join %+v", last)
		}
		if over := res[2146]; over != (repo.ReportResult{repo.Opened, 3146, 1_000_000, nil}) {
			t.Fatalf("overflowing report %+v, want a new window", over)
		}

		var ws []repo.Window
		for len(ws) < 2 {
			got, bad, _, err := r.Read(ctx, 0, "c1", ">", 10, 100*time.Millisecond)
			if err != nil || len(bad) != 0 {
				t.Fatalf("read: %v %v", bad, err)
			}
			ws = append(ws, got...)
		}
		deadline := time.Now().Add(5 * time.Second)
		for published := 0; published < 2; {
			fr, err := r.Flush(ctx, ws)
			if err != nil {
				t.Fatal(err)
			}
			published = 0
			for _, f := range fr {
				switch f.Status {
				case repo.Published, repo.Gone:
					published++
				case repo.Stale, repo.Lost:
					t.Fatalf("a window was not published: %+v", fr)
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("not published: %+v", fr)
			}
			time.Sleep(20 * time.Millisecond)
		}
		records := map[int64]push.Record{}
		for i := range 2 {
			rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			msg, err := sub.ReceiveMessage(rctx)
			cancel()
			if err != nil {
				t.Fatalf("push %d of 2: %v", i+1, err)
			}
			m, err := push.Decode([]byte(msg.Payload))
			if err != nil {
				t.Fatalf("%v: %s", err, msg.Payload)
			}
			records[m.Record.ID] = m.Record
		}
		if w := records[99]; w.Quantity != 2_147_010_003 || w.ComboCount != w.Quantity || w.CreatedAt != base+50 || w.Nickname != "smallest" {
			t.Fatalf("first window %+v", w)
		}
		if w := records[3146]; w.Quantity != 1_000_000 || w.CreatedAt != base+140 || w.Nickname != "fill" {
			t.Fatalf("second window %+v", w)
		}
	})
}

// TestDedupeRemembersAcrossBuckets checks window.dedupe's promise on the
// clock it is kept by (Redis's TIME, in buckets of window.dedupe): an id is
// a duplicate for at least window.dedupe after it was counted, whenever in
// its bucket it came. Ids are first sent 150 ms apart, so with a dedupe of
// 1 s they start in every part of a bucket, and each is re-sent every 50 ms
// for a second; every re-send answered within that second must be refused.
//
// A re-send is judged by when its answer came, not when it was sent: Redis
// ran it earlier than that, so the promise covers it however long the call
// took on a busy host (a fixed margin of 250 ms did not). More ids are sent
// until enough of them had a re-send in a later bucket than their first
// report: a slow loop takes longer, rather than failing.
func TestDedupeRemembersAcrossBuckets(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		s := settings()
		s.Dedupe = time.Second
		r := repo.New(rdb, s)
		if err := r.LoadScripts(ctx); err != nil {
			t.Fatal(err)
		}
		const gap, resend = 150 * time.Millisecond, 50 * time.Millisecond
		const minIDs, wantCrossed = 12, 8
		type sent struct {
			c           *combo.Contribution
			at, counted time.Time // before its first report was sent; after it was answered
			crossed     bool      // re-sent, and refused, in a later bucket
		}
		var live []*sent
		started, crossed, resends := 0, 0, 0
		var lastStart time.Time
		deadline := time.Now().Add(30 * time.Second)
		for started < minIDs || crossed < wantCrossed || len(live) > 0 {
			if time.Now().After(deadline) {
				t.Fatalf("after 30 s only %d of %d ids were re-sent in a later bucket (%d re-sends)", crossed, started, resends)
			}
			if (started < minIDs || crossed < wantCrossed) && time.Since(lastStart) >= gap {
				c := contribution(int64(900_000+started), fmt.Sprint("d", started), base)
				started++
				lastStart = time.Now()
				res, err := r.Report(ctx, []*combo.Contribution{c})
				if err != nil || res[0].Outcome == repo.Duplicate {
					t.Fatalf("id %d, first report: %+v %v", c.Id, res, err)
				}
				live = append(live, &sent{c: c, at: lastStart, counted: time.Now()})
			}
			kept := live[:0]
			for _, id := range live {
				before := time.Now()
				res, err := r.Report(ctx, []*combo.Contribution{id.c})
				after := time.Now()
				if after.Sub(id.at) >= s.Dedupe {
					continue // Redis may have run it past the second: either answer is right
				}
				if err != nil || res[0].Outcome != repo.Duplicate {
					t.Fatalf("id %d re-sent and answered within %v of its first report: %+v %v",
						id.c.Id, after.Sub(id.at).Round(time.Millisecond), res, err)
				}
				resends++
				// Redis ran the first report by counted and this one after
				// before: a later second is a later bucket.
				if !id.crossed && before.Unix() > id.counted.Unix() {
					id.crossed = true
					crossed++
				}
				kept = append(kept, id)
			}
			clear(live[len(kept):])
			live = kept
			time.Sleep(resend)
		}
		t.Logf("%d ids, %d re-sent in a later bucket, %d re-sends", started, crossed, resends)
		// Bounded: every dedupe set expires within two buckets, when the
		// lookups of the bucket after its own end.
		for _, k := range rdb.Keys(ctx, r.Keys().SeenPrefix(0)+"*").Val() {
			ttl := rdb.PTTL(ctx, k).Val()
			if ttl == -2 { // PTTL's "no such key": it expired since KEYS listed it
				continue
			}
			if ttl <= 0 || ttl > 2*s.Dedupe+2*time.Second {
				t.Errorf("dedupe set %s expires in %v", k, ttl)
			}
		}
	})
}

// While Redis refuses writes (here NOREPLICAS; MISCONF after a failed save
// and READONLY on a demoted master refuse the same way), a due window's
// flush fails without publishing, however often it is retried, and stays
// pending; once writes are accepted it is published exactly once. Real
// Redis only: miniredis has no min-replicas-to-write.
func TestFlushPublishesNothingWhileWritesAreRefused(t *testing.T) {
	rdb := testredis.Start(t, testredis.Options{}).Client()
	ctx := context.Background()
	r, sub := subscribedRepo(t, rdb)
	ws := dueWindow(t, r)

	if err := rdb.ConfigSet(ctx, "min-replicas-to-write", "1").Err(); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		fr, err := r.Flush(ctx, ws)
		if err != nil || fr[0].Err == nil || !strings.Contains(fr[0].Err.Error(), "NOREPLICAS") {
			t.Fatalf("flush while writes are refused: %+v %v, want a NOREPLICAS error", fr, err)
		}
	}
	// Anything published so far would reach the subscriber before this.
	if err := rdb.Publish(ctx, push.Channel(7), "sentinel").Err(); err != nil {
		t.Fatal(err)
	}
	if msg, err := receive(ctx, sub); err != nil || msg.Payload != "sentinel" {
		t.Fatalf("got %v %v before the sentinel: a refused flush published", msg, err)
	}
	if n := rdb.XLen(ctx, r.Keys().Stream(0)).Val(); n != 1 {
		t.Fatalf("stream holds %d entries, want the window still pending", n)
	}

	if err := rdb.ConfigSet(ctx, "min-replicas-to-write", "0").Err(); err != nil {
		t.Fatal(err)
	}
	fr, err := r.Flush(ctx, ws)
	if err != nil || fr[0].Status != repo.Published || fr[0].Quantity != 1 {
		t.Fatalf("flush once writes are accepted: %+v %v", fr, err)
	}
	if msg, err := receive(ctx, sub); err != nil || !strings.Contains(msg.Payload, `"quantity":1`) {
		t.Fatalf("push %v %v", msg, err)
	}
	if fr, err = r.Flush(ctx, ws); err != nil || fr[0].Status != repo.Gone {
		t.Fatalf("flush after publish %+v %v, want gone", fr, err)
	}
}

// While Redis refuses writes (NOREPLICAS here; MISCONF and OOM alike), a
// report of an id already counted is still a duplicate: it changes nothing
// and is not published on its own; a new id in the same call degrades.
func TestDuplicateWhileWritesAreRefused(t *testing.T) {
	rdb, r, sub, counted := countedThenRefusing(t, false)
	ctx := context.Background()
	fresh := contribution(2, "lily", base)
	res, err := r.Report(ctx, []*combo.Contribution{counted, fresh})
	if err != nil {
		t.Fatalf("report while writes are refused: %v", err)
	}
	if res[0].Outcome != repo.Duplicate {
		t.Errorf("id counted before: outcome %d, want duplicate", res[0].Outcome)
	}
	if res[1].Outcome != repo.Degraded || res[1].WindowID != 2 {
		t.Errorf("new id: %+v, want degraded", res[1])
	}
	// Only the new id is published on its own; then the sentinel.
	if err := rdb.Publish(ctx, push.Channel(7), "sentinel").Err(); err != nil {
		t.Fatal(err)
	}
	msg, err := receive(ctx, sub)
	if err != nil {
		t.Fatal(err)
	}
	if m, err := push.Decode([]byte(msg.Payload)); err != nil || m.Record.ID != 2 {
		t.Fatalf("first message %q, want the new id's record", msg.Payload)
	}
	if msg, err := receive(ctx, sub); err != nil || msg.Payload != "sentinel" {
		t.Fatalf("got %v %v before the sentinel: the duplicate was published", msg, err)
	}
}

// A Redis that lost its scripts (restart, failover) answers NOSCRIPT; Flush
// loads them and runs those windows again in the same call.
func TestFlushReloadsLostScripts(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		r, sub := subscribedRepo(t, rdb)
		ws := dueWindow(t, r)
		if err := rdb.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		fr, err := r.Flush(ctx, ws)
		if err != nil || fr[0].Err != nil || fr[0].Status != repo.Published {
			t.Fatalf("flush after SCRIPT FLUSH: %+v %v, want published", fr, err)
		}
		if _, err := receive(ctx, sub); err != nil {
			t.Fatal(err)
		}
	})
}

// dueWindow reports one contribution, reads its window as consumer c1 and
// returns it once it is due, unflushed.
func dueWindow(t *testing.T, r *repo.Repo) []repo.Window {
	t.Helper()
	ctx := context.Background()
	if _, err := r.Report(ctx, []*combo.Contribution{contribution(1, "rose", base)}); err != nil {
		t.Fatal(err)
	}
	ws, _, _, err := r.Read(ctx, 0, "c1", ">", 10, -1)
	if err != nil || len(ws) != 1 {
		t.Fatalf("read %v %v", ws, err)
	}
	untilDue(t, r, ws)
	return ws
}

// untilDue waits until Redis's clock says ws[0] is due. It asks Redis
// rather than flushing early first: a flush meant to be early, sent W +
// grace after the report on a stalled CI host, published the window.
func untilDue(t *testing.T, r *repo.Repo, ws []repo.Window) {
	t.Helper()
	untilRedisTime(t, r, ws[0].Shard, ws[0].Due+1)
}

// untilStale waits until Redis's clock finds w older than stale: the
// flush script's stale check reads that clock, not this host's.
func untilStale(t *testing.T, r *repo.Repo, w repo.Window, stale time.Duration) {
	t.Helper()
	msPart, _, _ := strings.Cut(w.ID, "-")
	opened, err := strconv.ParseInt(msPart, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	untilRedisTime(t, r, w.Shard, opened+stale.Milliseconds()+2)
}

// untilRedisTime waits until shard's Redis clock reads ms or later.
func untilRedisTime(t *testing.T, r *repo.Repo, shard int, ms int64) {
	t.Helper()
	for {
		now, err := r.Time(context.Background(), shard)
		if err != nil {
			t.Fatal(err)
		}
		wait := ms - now.UnixMilli()
		if wait <= 0 {
			return
		}
		time.Sleep(time.Duration(wait) * time.Millisecond)
	}
}

// A replica (a demoted master, after a failover) refuses the report
// script's writes with READONLY. That is Redis unavailable, not a failed
// aggregation: a degraded PUBLISH there would not reach the new master's
// subscribers, so nothing is published and the caller may retry.
func TestReportOnReplicaIsUnavailable(t *testing.T) {
	master := testredis.Start(t, testredis.Options{})
	replica := testredis.Start(t, testredis.Options{Args: []string{"--replicaof", "127.0.0.1", fmt.Sprint(master.Port)}})
	rdb := replica.Client()
	r, sub := subscribedRepoNoGroups(t, rdb)
	_, err := r.Report(context.Background(), []*combo.Contribution{contribution(1, "rose", base), contribution(2, "lily", base)})
	if !errors.Is(err, repo.ErrUnavailable) || !strings.Contains(err.Error(), "READONLY") {
		t.Fatalf("report on a replica: %v, want ErrUnavailable naming READONLY", err)
	}
	if err := rdb.Publish(context.Background(), push.Channel(7), "sentinel").Err(); err != nil {
		t.Fatal(err)
	}
	if msg, err := receive(context.Background(), sub); err != nil || msg.Payload != "sentinel" {
		t.Fatalf("got %v %v before the sentinel: a refused report was published", msg, err)
	}
}

// A retry that reaches a demoted master (made a replica before it could
// sync, its dedupe sets stale) is not answered duplicate by what that
// node once counted: it fails UNAVAILABLE, and is sent again to the new
// master. The report script's lookup for a refused write read the stale
// sets and answered duplicate, a success: the caller stopped, and the
// report, lost with the failover, was never counted.
func TestRetryOnADemotedMasterIsNotADuplicate(t *testing.T) {
	ctx := context.Background()
	old := testredis.Start(t, testredis.Options{})
	rdb := old.Client()
	r, _ := subscribedRepoNoGroups(t, rdb)
	c := contribution(1, "rose", base)
	if res, err := r.Report(ctx, []*combo.Contribution{c}); err != nil || res[0].Outcome != repo.Opened {
		t.Fatalf("first report: %+v %v", res, err)
	}
	demote(t, rdb)
	res, err := r.Report(ctx, []*combo.Contribution{c})
	if !errors.Is(err, repo.ErrUnavailable) || !strings.Contains(err.Error(), "READONLY") {
		t.Fatalf("retry on the demoted master: %+v %v, want ErrUnavailable naming READONLY", res, err)
	}
}

// demote makes rdb's server a replica of a master that never answers: it
// keeps its own data, stale, and refuses writes (READONLY).
func demote(t *testing.T, rdb *redis.Client) {
	t.Helper()
	if err := rdb.Do(context.Background(), "REPLICAOF", "127.0.0.1", testredis.FreePort(t)).Err(); err != nil {
		t.Fatal(err)
	}
}

// A degraded publish sent again to a demoted master (a replica now, its
// dedupe sets stale) fails UNAVAILABLE: the id it remembered as the master
// does not make it answer "already published", which Go answers duplicate
// for a report the new master never saw.
func TestDegradedPublishOnADemotedMasterIsNotADuplicate(t *testing.T) {
	ctx := context.Background()
	old := testredis.Start(t, testredis.Options{})
	rdb := old.Client()
	r, _ := subscribedRepoNoGroups(t, rdb)
	c := contribution(5, "k0", base)
	if _, err := repo.PublishSingles(ctx, r, []*combo.Contribution{c}); err != nil {
		t.Fatal(err)
	}
	demote(t, rdb)
	if known, err := repo.PublishSingles(ctx, r, []*combo.Contribution{c}); !errors.Is(err, repo.ErrUnavailable) || !strings.Contains(err.Error(), "READONLY") {
		t.Fatalf("degraded publish sent again on the demoted master: %v %v, want ErrUnavailable naming READONLY", known, err)
	}
}

// When redis.addr is a name that moves to the new master after a failover
// and the old master becomes a replica, the report path follows it: a
// READONLY answer drops its connection (go-redis does so for READONLY
// error replies), and the next one is dialed to the new master. Answered
// as a report's failure inside the script's reply, it was data to
// go-redis: the pooled connections stayed on the old master, and every
// report failed for as long as the process lived.
func TestReportPathFollowsANameToTheNewMaster(t *testing.T) {
	ctx := context.Background()
	old := testredis.Start(t, testredis.Options{})
	next := testredis.Start(t, testredis.Options{})
	var target atomic.Value
	target.Store(old.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: "redis.example:6379", MaxRetries: -1, ContextTimeoutEnabled: true,
		Dialer: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, target.Load().(string))
		}})
	t.Cleanup(func() { _ = rdb.Close() })
	r, _ := subscribedRepoNoGroups(t, rdb)
	if err := r.LoadScripts(ctx); err != nil {
		t.Fatal(err)
	}
	// Connections to the old master in the pool, as under load.
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			if _, err := r.Report(ctx, []*combo.Contribution{contribution(int64(100+i), fmt.Sprint("k", i), base)}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	oldCl := redis.NewClient(&redis.Options{Addr: old.Addr})
	t.Cleanup(func() { _ = oldCl.Close() })
	if err := oldCl.Do(ctx, "REPLICAOF", "127.0.0.1", next.Port).Err(); err != nil {
		t.Fatal(err)
	}
	target.Store(next.Addr) // the name now resolves to the new master
	var last error
	for id, deadline := int64(1000), time.Now().Add(3*time.Second); time.Now().Before(deadline); id++ {
		res, err := r.Report(ctx, []*combo.Contribution{contribution(id, "rose", base)})
		if err == nil && res[0].Outcome == repo.Opened {
			return
		}
		last = err
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("reports still fail 3 s after the name moved to the new master: %v", last)
}

// A degraded publish that reaches a replica (its master was failed over,
// by Sentinel, between the report's script and it) publishes nothing and fails
// UNAVAILABLE, as the report script does there: the replica's PUBLISH
// would reach only its own subscribers, not the gateway's on the new
// master, and the id is not remembered. Under OOM, by contrast, the report
// is published all the same (degraded reports exist for that), though its
// id cannot be remembered.
func TestDegradedPublishWhereWritesAreRefused(t *testing.T) {
	ctx := context.Background()
	master := testredis.Start(t, testredis.Options{})
	c := contribution(5, "k0", base)
	t.Run("replica", func(t *testing.T) {
		replica := testredis.Start(t, testredis.Options{Args: []string{"--replicaof", "127.0.0.1", fmt.Sprint(master.Port)}})
		rdb := replica.Client()
		r, sub := subscribedRepoNoGroups(t, rdb)
		if _, err := repo.PublishSingles(ctx, r, []*combo.Contribution{c}); !errors.Is(err, repo.ErrUnavailable) || !strings.Contains(err.Error(), "READONLY") {
			t.Fatalf("degraded publish on a replica: %v, want ErrUnavailable naming READONLY", err)
		}
		expectNoMorePushes(t, rdb, sub)
	})
	t.Run("OOM", func(t *testing.T) {
		rdb := master.Client()
		r, sub := subscribedRepoNoGroups(t, rdb)
		if err := rdb.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rdb.ConfigSet(context.Background(), "maxmemory", "0") })
		if _, err := repo.PublishSingles(ctx, r, []*combo.Contribution{c}); err != nil {
			t.Fatalf("degraded publish under OOM: %v", err)
		}
		if msg, err := receive(ctx, sub); err != nil {
			t.Fatal(err)
		} else if m, err := push.Decode([]byte(msg.Payload)); err != nil || m.Record.ID != 5 {
			t.Fatalf("push %q, want report 5 on its own", msg.Payload)
		}
		if keys := rdb.Keys(ctx, r.Keys().SeenPrefix(0)+"*").Val(); len(keys) != 0 {
			t.Fatalf("dedupe sets %v written under OOM", keys)
		}
	})
}

// While Redis refuses writes but still publishes (NOREPLICAS here; MISCONF
// and OOM alike), every report of a call is answered degraded and published
// on its own, all in one round trip: a call is not left half published
// when its time runs out.
func TestDegradedReportsArePublishedTogether(t *testing.T) {
	ctx := context.Background()
	r, sub, _, count := refusingWrites(t)
	cs := make([]*combo.Contribution, 50)
	for i := range cs {
		cs[i] = contribution(int64(i+1), fmt.Sprint("t", i), base)
	}
	res, err := r.Report(ctx, cs)
	if err != nil {
		t.Fatalf("report while writes are refused: %v", err)
	}
	for i, rr := range res {
		if rr.Outcome != repo.Degraded || rr.WindowID != cs[i].Id || rr.WindowQuantity != 1 {
			t.Fatalf("result %d = %+v, want degraded", i, rr)
		}
	}
	for range cs {
		if _, err := receive(ctx, sub); err != nil {
			t.Fatal(err)
		}
	}
	if count.alone.Load() != 0 || count.pipelines.Load() != 1 || count.inPipelines.Load() != 50 {
		t.Fatalf("degraded publishes: %d alone, %d in %d pipelines; want all 50 in one", count.alone.Load(), count.inPipelines.Load(), count.pipelines.Load())
	}
}

// refusingWrites is subscribedRepo on a redis-server that refuses writes
// but answers (min-replicas-to-write with no replica: NOREPLICAS), with a
// count of the PUBLISH commands sent to it.
func refusingWrites(t *testing.T) (*repo.Repo, *redis.PubSub, *redis.Client, *publishCounter) {
	t.Helper()
	rdb := testredis.Start(t, testredis.Options{}).Client()
	r, sub := subscribedRepo(t, rdb)
	if err := rdb.ConfigSet(context.Background(), "min-replicas-to-write", "1").Err(); err != nil {
		t.Fatal(err)
	}
	count := &publishCounter{}
	rdb.AddHook(count)
	return r, sub, rdb, count
}

// publishCounter counts the commands that publish sent alone and in
// pipelines: PUBLISH, and the script that publishes a degraded report.
type publishCounter struct{ alone, pipelines, inPipelines atomic.Int64 }

func isPublish(cmd redis.Cmder) bool { return cmd.Name() == "publish" || repo.IsDegradedPublish(cmd) }

func (p *publishCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (p *publishCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if isPublish(cmd) {
			p.alone.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (p *publishCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		n := 0
		for _, c := range cmds {
			if isPublish(c) {
				n++
			}
		}
		if n > 0 {
			p.pipelines.Add(1)
			p.inPipelines.Add(int64(n))
		}
		return next(ctx, cmds)
	}
}

// While Redis refuses writes (OOM), EnsureGroup answers by a read: an
// existing group is fine (the worker can read and flush), a missing stream
// is ErrNoStream naming the shard and the refusal; EnsureGroups tries
// every shard, not only up to the first that fails.
func TestEnsureGroupWhileWritesAreRefused(t *testing.T) {
	rdb := testredis.Start(t, testredis.Options{}).Client()
	ctx := context.Background()
	s := settings()
	s.Shards = 3
	r := repo.New(rdb, s)
	if err := r.EnsureGroup(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := rdb.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.ConfigSet(context.Background(), "maxmemory", "0") })
	if err := r.EnsureGroup(ctx, 1); err != nil {
		t.Fatalf("EnsureGroup of an existing group under OOM: %v", err)
	}
	err := r.EnsureGroups(ctx)
	if msg := fmt.Sprint(err); !errors.Is(err, repo.ErrNoStream) || !strings.Contains(msg, "shard 0") ||
		!strings.Contains(msg, "shard 2") || strings.Contains(msg, "shard 1") || !strings.Contains(msg, "OOM") {
		t.Fatalf("EnsureGroups with shards 0 and 2 never created, under OOM: %v; want ErrNoStream naming both and OOM", err)
	}
}

// Time answers the clock of Redis, through its script, on redis-server and
// on the embedded miniredis (TestTimeRunsOnTheShardsMaster checks on a
// cluster that it runs on the shard's node).
func TestTimeOfAShardsNode(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		s := settings()
		s.Shards = 2
		r := repo.New(rdb, s)
		for shard := range 2 {
			got, err := r.Time(context.Background(), shard)
			if err != nil {
				t.Fatalf("Time(shard %d): %v", shard, err)
			}
			if d := time.Since(got); d < -time.Second || d > time.Second {
				t.Fatalf("Time(shard %d) = %v, %v off this host's clock", shard, got, d)
			}
		}
	})
}

// A window may be published no earlier than W after its first report
// arrived (CONTRACT §3). Its stream id floors Redis's clock to the
// millisecond, so that report may have arrived up to 1 ms after the id's
// millisecond: with window.grace 0, a window due at id + W could be
// published before W had passed. Go's due time and the flush script's
// agree on one more millisecond.
func TestDueCountsFromTheLatestArrivalTheIDAllows(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		s := settings()
		s.Grace = 0
		r, _ := subscribedRepoWithGroups(t, rdb, s)
		if _, err := r.Report(ctx, []*combo.Contribution{contribution(1, "rose", base)}); err != nil {
			t.Fatal(err)
		}
		ws, _, _, err := r.Read(ctx, 0, "c1", ">", 10, 100*time.Millisecond)
		if err != nil || len(ws) != 1 {
			t.Fatalf("read: %v %v", ws, err)
		}
		opened, err := strconv.ParseInt(strings.SplitN(ws[0].ID, "-", 2)[0], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		if want := opened + s.Window.Milliseconds() + 1; ws[0].Due != want {
			t.Fatalf("due %d, want id's ms %d + W %d + 1", ws[0].Due, opened, s.Window.Milliseconds())
		}
		// The script holds the window until then too: flushed by a repo of
		// W = 1 h it is early, due at its own id + 1 h + 1 ms.
		s.Window, s.Stale = time.Hour, 2*time.Hour
		fr, err := repo.New(rdb, s).Flush(ctx, ws)
		if err != nil || fr[0].Status != repo.Early {
			t.Fatalf("flush: %+v %v", fr, err)
		}
		if want := opened + time.Hour.Milliseconds() + 1; fr[0].Due != want {
			t.Fatalf("script's due %d, want id's ms %d + 1 h + 1", fr[0].Due, opened)
		}
	})
}

// A flush run past its window's NotAfter (it waited that long on a paused
// node's socket, and its sender stopped waiting) answers Late with Redis's
// clock and changes nothing: no push, the window and its entry still there
// for a flush in time.
func TestFlushPastItsDeadlineChangesNothing(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		r, sub := subscribedRepo(t, rdb)
		if _, err := r.Report(ctx, []*combo.Contribution{contribution(1, "late", base)}); err != nil {
			t.Fatal(err)
		}
		ws, _, _, err := r.Read(ctx, 0, "c", ">", 10, -1)
		if err != nil || len(ws) != 1 {
			t.Fatalf("read %v %v", ws, err)
		}
		untilDue(t, r, ws)
		before, err := rdb.Do(ctx, "TIME").Slice()
		if err != nil {
			t.Fatal(err)
		}
		sec, _ := strconv.ParseInt(before[0].(string), 10, 64)
		ws[0].NotAfter = sec*1000 - 1 // a second and more ago by Redis's clock
		res, err := r.Flush(ctx, ws)
		if err != nil || res[0].Status != repo.Late || res[0].Now <= ws[0].NotAfter {
			t.Fatalf("flush past its deadline: %+v %v", res, err)
		}
		if n := rdb.XLen(ctx, r.Keys().Stream(0)).Val(); n != 1 {
			t.Fatalf("stream holds %d entries after a late flush, want 1", n)
		}
		ws[0].NotAfter = res[0].Now + 10_000
		res, err = r.Flush(ctx, ws)
		if err != nil || res[0].Status != repo.Published || res[0].Quantity != 1 {
			t.Fatalf("flush in time: %+v %v", res, err)
		}
		msg, err := receive(ctx, sub)
		if err != nil {
			t.Fatal(err)
		}
		if m, err := push.Decode([]byte(msg.Payload)); err != nil || m.Record.Quantity != 1 {
			t.Fatalf("push %q: %v", msg.Payload, err)
		}
		if m, err := sub.ReceiveTimeout(ctx, 100*time.Millisecond); err == nil {
			t.Fatalf("a second push: %v", m)
		}
	})
}

// ReplyTimeout is how long the client waits for one send's reply (its
// read timeout), the bound of a flush's NotAfter, on every kind of client.
func TestReplyTimeoutIsTheClientsReadTimeout(t *testing.T) {
	const d = 300 * time.Millisecond
	for _, c := range []struct {
		name string
		rdb  redis.UniversalClient
		want time.Duration
	}{
		{"client", redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ReadTimeout: d}), d},
		{"cluster", redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}, ReadTimeout: d}), d},
		// As the service builds it with redis.sentinel_addrs: a failover
		// client, whose connections go-redis closes at +switch-master.
		{"sentinel", redis.NewUniversalClient(&redis.UniversalOptions{MasterName: "m", Addrs: []string{"127.0.0.1:1"}, ReadTimeout: d}), d},
		{"no read deadline", redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ReadTimeout: -2}), 0},
		{"no read timeout", redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ReadTimeout: -1}), 0},
	} {
		t.Cleanup(func() { c.rdb.Close() })
		if got := repo.New(c.rdb, settings()).ReplyTimeout(); got != c.want {
			t.Errorf("%s: ReplyTimeout %v, want %v", c.name, got, c.want)
		}
	}
}

// A window opened while the stream's last id was ahead of Redis's clock
// (after a step back of the clock, or a failover to a node whose clock is
// behind; XADD keeps ids increasing) has an id later than the time its
// data's TTL started: data expired by then is stale, not lost, up to
// repo.IDsAhead. Counted lost, it fired the critical alert for an expiry.
func TestFlushTellsDataExpiredAfterAClockStepBackStale(t *testing.T) {
	m := miniredis.RunT(t)
	rdb := serviceLikeClient(t, m.Addr())
	ctx := context.Background()
	s, r := staleRepo(t, rdb)
	now := time.Now()
	m.SetTime(now.Add(4 * time.Second)) // a window opened on a clock 4 s ahead
	if _, err := r.Report(ctx, []*combo.Contribution{contribution(1, "t1", base)}); err != nil {
		t.Fatal(err)
	}
	m.SetTime(now) // the clock steps back
	if _, err := r.Report(ctx, []*combo.Contribution{contribution(2, "t2", base)}); err != nil {
		t.Fatal(err)
	}
	ws, _, _, err := r.Read(ctx, 0, "c", ">", 10, -1)
	if err != nil || len(ws) != 2 {
		t.Fatalf("read %v %v", ws, err)
	}
	ttl := s.Stale + s.Window + s.Grace + 10*time.Second
	m.FastForward(ttl)
	m.SetTime(now.Add(ttl + time.Second))
	if n := rdb.Exists(ctx, r.Keys().Current(0, 7, 42, "t2")).Val(); n != 0 {
		t.Fatal("t2's data is still there: the test did not test")
	}
	res, err := r.Flush(ctx, ws[1:])
	if err != nil || res[0].Status != repo.Stale {
		t.Fatalf("flush of a window whose data expired, its id 4 s ahead of its TTL's start: %+v %v, want stale", res, err)
	}
}
