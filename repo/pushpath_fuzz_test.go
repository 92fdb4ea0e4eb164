package repo_test

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/combo-service/combo-service/internal/testredis"
	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/push"
	"github.com/combo-service/combo-service/repo"
	"github.com/combo-service/combo-service/validate"
	"github.com/combo-service/combo-service/window"
)

// FuzzPushPathMatchesMerge: CONTRACT.md §2, "when reports of a key arrive
// in created_at order, the push path and MergeLatest produce identical
// records". Valid reports (any strings the RPC accepts) are sent in
// created_at order to a real redis-server through report.lua, their
// windows read, flushed through flush.lua once due, and the pushed
// messages decoded: they must be exactly window.Merge of the same rows,
// one message per window.
func FuzzPushPathMatchesMerge(f *testing.F) {
	f.Add([]byte{0, 0, 1, 1, 10, 1, 2, 2, 25, 2, 3, 3}, "rose", "a:{b}:w:1", "小明", "<&>\"", false, uint8(2))
	f.Add([]byte{0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1}, "x", "x ", "\u2028", "\x1f", true, uint8(1))
	f.Add([]byte{0, 1, 5, 1, 29, 1, 4, 1, 30, 1, 3, 1, 59, 1, 2, 1}, "火箭", "火", "n", "", false, uint8(3))

	const w = 30 * time.Millisecond
	s := repo.Settings{Window: w, Grace: 5 * time.Millisecond, Dedupe: 10 * time.Second,
		Stale: 10 * time.Second, Timeout: 2 * time.Second, Shards: 2, StreamMaxLen: 100000}
	rdb := redis.NewClient(&redis.Options{Addr: testredis.Start(f, testredis.Options{}).Addr, MaxRetries: -1,
		ContextTimeoutEnabled: true, ReadTimeout: time.Minute, WriteTimeout: time.Minute})
	f.Cleanup(func() { rdb.Close() })
	ctx := context.Background()
	r := repo.New(rdb, s)
	if err := r.LoadScripts(ctx); err != nil {
		f.Fatal(err)
	}
	if err := r.EnsureGroups(ctx); err != nil {
		f.Fatal(err)
	}
	sub := rdb.PSubscribe(ctx, push.ChannelPattern)
	f.Cleanup(func() { sub.Close() })
	if _, err := sub.Receive(ctx); err != nil {
		f.Fatal(err)
	}
	var run int64

	f.Fuzz(func(t *testing.T, data []byte, t1, t2, nick, name string, batch bool, shift uint8) {
		run++
		activity := run
		idBase := run * 1000
		types := []string{t1, t2}
		var cs []*combo.Contribution
		seen := map[int64]bool{}
		for i := 0; i+4 <= len(data) && len(cs) < 16; i += 4 {
			b := data[i : i+4]
			c := &combo.Contribution{
				Id: idBase + int64(b[1]%32) + 1, ActivityId: activity, UserId: int64(b[3]&1) + 1,
				StarId: int64(b[1] >> 5), ItemId: int64(b[3]>>1) + 1, ItemType: types[(b[3]>>1)&1],
				ItemName: name, ItemIcon: "i" + name, Nickname: nick + fmt.Sprint(b[1]%3), AvatarUrl: nick,
				Quantity: int32(b[2]%7) + 1, CreatedAt: base + int64(b[0])*int64(shift%4+1),
			}
			if seen[c.Id] || validate.Contribution(c, "c") != nil {
				continue
			}
			seen[c.Id] = true
			cs = append(cs, c)
		}
		if len(cs) == 0 {
			return
		}
		// Arrival in created_at order; ties keep the fuzzer's order.
		slices.SortStableFunc(cs, func(a, b *combo.Contribution) int { return int(a.CreatedAt - b.CreatedAt) })
		got, want := pushedAndMerged(t, r, sub, s, cs, batch)
		if !slices.Equal(got, want) {
			in := ""
			for _, c := range cs {
				in += fmt.Sprintf("  id=%d user=%d type=%q q=%d at=+%d\n", c.Id-idBase, c.UserId, c.ItemType, c.Quantity, c.CreatedAt-base)
			}
			t.Fatalf("reports in arrival order:\n%spushed:\n  %v\nMerge:\n  %v", in, got, want)
		}
	})
}

// pushedAndMerged reports cs in their order (all in one call when batch, up
// to 1000 a call), flushes their windows once due, and returns the records
// pushed and window.Merge's records of the same rows, each sorted.
func pushedAndMerged(t *testing.T, r *repo.Repo, sub *redis.PubSub, s repo.Settings, cs []*combo.Contribution, batch bool) (got, want []string) {
	t.Helper()
	ctx := context.Background()
	step := 1
	if batch {
		step = 1000
	}
	for i := 0; i < len(cs); i += step {
		part := cs[i:min(i+step, len(cs))]
		res, err := r.Report(ctx, part)
		if err != nil {
			t.Fatal(err)
		}
		for j, x := range res {
			if x.Outcome == repo.Degraded || x.Outcome == repo.Duplicate {
				t.Fatalf("report %d: %+v", i+j, x)
			}
		}
	}

	var ws []repo.Window
	for shard := 0; shard < s.Shards; shard++ {
		for {
			got, bad, _, err := r.Read(ctx, shard, "c1", ">", 1000, -1)
			if err != nil || len(bad) != 0 {
				t.Fatalf("read: %v %v", bad, err)
			}
			if len(got) == 0 {
				break
			}
			ws = append(ws, got...)
		}
	}
	var due int64
	for _, x := range ws {
		due = max(due, x.Due)
	}
	for {
		now, err := r.Time(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		wait := due + 1 - now.UnixMilli()
		if wait <= 0 {
			break
		}
		time.Sleep(time.Duration(wait) * time.Millisecond)
	}
	// A flush call holds windows of one shard.
	published := 0
	for shard := 0; shard < s.Shards; shard++ {
		var mine []repo.Window
		for _, x := range ws {
			if x.Shard == shard {
				mine = append(mine, x)
			}
		}
		if len(mine) == 0 {
			continue
		}
		fr, err := r.Flush(ctx, mine)
		if err != nil {
			t.Fatal(err)
		}
		for i, x := range fr {
			if x.Err != nil || x.Status != repo.Published {
				t.Fatalf("flush %d: %+v", i, x)
			}
			published++
		}
	}

	activity := cs[0].ActivityId
	for len(got) < published {
		c, cancel := context.WithTimeout(ctx, 2*time.Second)
		msg, err := sub.ReceiveMessage(c)
		cancel()
		if err != nil {
			t.Fatalf("after %d of %d messages: %v", len(got), published, err)
		}
		m, err := push.Decode([]byte(msg.Payload))
		if err != nil {
			t.Fatalf("%s: %v", msg.Payload, err)
		}
		if m.ActivityID != activity || msg.Channel != push.Channel(activity) {
			t.Fatalf("message of another run on %s: %s", msg.Channel, msg.Payload)
		}
		got = append(got, fmt.Sprintf("%+v", m.Record))
	}

	rows := make([]window.Row, len(cs))
	for i, c := range cs {
		rows[i] = window.Row{ID: c.Id, ActivityID: c.ActivityId, UserID: c.UserId, StarID: c.StarId, ItemID: c.ItemId,
			ItemType: c.ItemType, ItemName: c.ItemName, ItemIcon: c.ItemIcon, Nickname: c.Nickname,
			AvatarURL: c.AvatarUrl, Quantity: c.Quantity, CreatedAt: c.CreatedAt}
	}
	for _, m := range window.Merge(rows, s.Window) {
		rec := push.Record{ID: m.ID, UserID: m.UserID, Nickname: m.Nickname, AvatarURL: m.AvatarURL, StarID: m.StarID,
			ItemID: m.ItemID, ItemType: m.ItemType, ItemName: m.ItemName, ItemIcon: m.ItemIcon,
			Quantity: m.Quantity, ComboCount: m.Quantity, CreatedAt: m.CreatedAt}
		want = append(want, fmt.Sprintf("%+v", rec))
	}
	sort.Strings(got)
	sort.Strings(want)
	return got, want
}
