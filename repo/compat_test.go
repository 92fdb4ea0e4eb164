package repo_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap/zaptest"

	"github.com/combo-service/combo-service/internal/testredis"
	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/metrics"
	"github.com/combo-service/combo-service/push"
	"github.com/combo-service/combo-service/repo"
	"github.com/combo-service/combo-service/worker"
)

// During a rolling deploy replicas of the oldest version whose state is
// compatible (598ec99, README "Rolling upgrades") share Redis with this
// one: this version must join, dedupe and publish what they wrote. The
// state is written here as 598ec99's report script writes it, with its
// key names, record layout and entry field spelled out literally rather
// than built by Keys, so that a change to the layout fails this test
// instead of silently changing what old replicas' state means:
//
//	combo:{0}:w:<a>:<u>:<len>:<type>  STRING total(%04d) \x1f anchor \x1f id \x1f smallest created_at or "" \x1f stream id \x1f fragment, PX ttl
//	combo:{0}:p:<stream id>           the same, renamed there when a newer window displaced it
//	combo:{0}:stream                  entry {k: <a>:<u>:<len>:<type>}, group combo-workers created at 0
//	combo:{0}:s:<bucket>:<id % 8192>  SET {id, 0}, bucket = Redis ms / window.dedupe ms
func TestStateWrittenByEarlierVersionsIsCountedAndPushed(t *testing.T) {
	ctx := context.Background()
	rdb := serviceLikeClient(t, testredis.Start(t, testredis.Options{}).Addr)
	s := settings() // Dedupe 10s: a whole number of seconds, as both versions need to agree on buckets
	const stream, group = "combo:{0}:stream", "combo-workers"
	if err := rdb.XGroupCreateMkStream(ctx, stream, group, "0").Err(); err != nil {
		t.Fatal(err)
	}
	tm, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	now := tm.UnixMilli()
	ttl := (s.Stale + s.Window + s.Grace + 10*time.Second).Milliseconds() // 598ec99's window TTL
	const sep = "\x1f"
	// frag is push.Fragment's layout: star_id, item_id, then nickname,
	// avatar_url, item_name, item_icon JSON-escaped without their quotes.
	frag := func(star, item int, nick, avatar, name, icon string) string {
		return strconv.Itoa(star) + sep + strconv.Itoa(item) + sep + nick + sep + avatar + sep + name + sep + icon
	}
	// open writes a window of the combo key k as 598ec99 opens and joins
	// one, at key (its current key, or its parked key once the stream id
	// is known), and returns its stream id.
	open := func(k string, key func(sid string) string, total, anchor, id, smallest, fr string) string {
		t.Helper()
		sid, err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []string{"k", k}}).Result()
		if err != nil {
			t.Fatal(err)
		}
		v := total + sep + anchor + sep + id + sep + smallest + sep + sid + sep + fr
		if err := rdb.Set(ctx, key(sid), v, time.Duration(ttl)*time.Millisecond).Err(); err != nil {
			t.Fatal(err)
		}
		return sid
	}
	at := func(key string) func(string) string { return func(string) string { return key } }
	parked := func(sid string) string { return "combo:{0}:p:" + sid }
	ms := func(d int64) string { return strconv.FormatInt(now+d, 10) }

	// A: user 42's open window, three reports, smallest id 5001, one of
	// them already counted in this dedupe bucket.
	open("7:42:4:rose", at("combo:{0}:w:7:42:4:rose"), "0003", ms(0), "5001", "",
		frag(9, 3, `小\"明`, "https://a/b.png", "玫瑰", "https://a/i.png"))
	bucket := now / s.Dedupe.Milliseconds()
	set := "combo:{0}:s:" + strconv.FormatInt(bucket, 10) + ":" + strconv.Itoa(5001%8192)
	if err := rdb.SAdd(ctx, set, "5001", "0").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.PExpireAt(ctx, set, time.UnixMilli((bucket+3)*s.Dedupe.Milliseconds())).Err(); err != nil {
		t.Fatal(err)
	}
	// B: user 43's window displaced (parked) by C, a five-digit total; C
	// has a smaller created_at than its anchor (a late row joined it).
	open("7:43:6:烟花", parked, "12345", ms(-150), "6001", "",
		frag(0, 4, "b", "", "烟花", ""))
	open("7:43:6:烟花", at("combo:{0}:w:7:43:6:烟花"), "0002", ms(60), "6100", ms(55),
		frag(1, 4, "c", "", "烟花", ""))

	r, sub := subscribedRepoWith(t, rdb, s)
	rose := func(id int64, createdAt int64) *combo.Contribution {
		c := contribution(id, "rose", createdAt)
		c.UserId = 42
		return c
	}
	res, err := r.Report(ctx, []*combo.Contribution{rose(5001, now), rose(5002, now+10)})
	if err != nil {
		t.Fatal(err)
	}
	if want := (repo.ReportResult{Outcome: repo.Duplicate}); res[0] != want {
		t.Errorf("id counted by the old version: %+v, want %+v", res[0], want)
	}
	if want := (repo.ReportResult{Outcome: repo.Joined, WindowID: 5001, WindowQuantity: 4}); res[1] != want {
		t.Errorf("report into the old version's window: %+v, want %+v", res[1], want)
	}

	wk := worker.New(r, worker.Config{Consumer: "new", ClaimIdle: time.Hour, Block: 50 * time.Millisecond},
		zaptest.NewLogger(t), metrics.New(prometheus.NewRegistry()))
	wk.Start()
	defer wk.Shutdown(context.Background())
	want := map[int64]push.Record{
		5001: {ID: 5001, UserID: 42, Nickname: `小"明`, AvatarURL: "https://a/b.png", StarID: 9, ItemID: 3, ItemType: "rose",
			ItemName: "玫瑰", ItemIcon: "https://a/i.png", Quantity: 4, ComboCount: 4, CreatedAt: now},
		6001: {ID: 6001, UserID: 43, Nickname: "b", ItemID: 4, ItemType: "烟花", ItemName: "烟花",
			Quantity: 12345, ComboCount: 12345, CreatedAt: now - 150},
		6100: {ID: 6100, UserID: 43, Nickname: "c", StarID: 1, ItemID: 4, ItemType: "烟花", ItemName: "烟花",
			Quantity: 2, ComboCount: 2, CreatedAt: now + 55},
	}
	deadline := time.After(10 * time.Second)
	// Not "for range want": the loop deletes from want, and a map entry
	// deleted before its turn is skipped, so the loop could end with a
	// window not yet pushed (and its entry still pending).
	for len(want) > 0 {
		var msg *redis.Message
		select {
		case msg = <-sub.Channel():
		case <-deadline:
			t.Fatalf("pushes still missing: %v", want)
		}
		m, err := push.Decode([]byte(msg.Payload))
		if err != nil {
			t.Fatal(err)
		}
		if w, ok := want[m.Record.ID]; !ok || m.Record != w || m.ActivityID != 7 {
			t.Fatalf("push %s, want one of %+v", msg.Payload, want)
		}
		delete(want, m.Record.ID)
	}
	// Every entry acknowledged and deleted, every window key gone: the
	// flush script does both before it publishes, in one step.
	if n := rdb.XPending(ctx, stream, group).Val().Count; n != 0 {
		t.Errorf("%d entries pending", n)
	}
	if n := rdb.XLen(ctx, stream).Val(); n != 0 {
		t.Errorf("stream holds %d entries", n)
	}
	for _, p := range repo.WindowPatterns() {
		if ks := rdb.Keys(ctx, p).Val(); len(ks) != 0 {
			t.Errorf("windows left: %v", ks)
		}
	}
}
