package main

import (
	"context"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/combo-service/combo-service/internal/testredis"
)

// commandCount counts the commands a client sends, on their own (a round
// trip each) and inside pipelines.
type commandCount struct {
	mu            sync.Mutex
	single, piped map[string]int
}

func (h *commandCount) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *commandCount) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.mu.Lock()
		h.single[cmd.Name()]++
		h.mu.Unlock()
		return next(ctx, cmd)
	}
}

func (h *commandCount) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.mu.Lock()
		for _, c := range cmds {
			h.piped[c.Name()]++
		}
		h.mu.Unlock()
		return next(ctx, cmds)
	}
}

// The naive comparator is the source design's write path (seeds/000
// §4.2), which every published ratio divides by: per purchase HINCRBY,
// 10 HSETNX, EXPIRE and SET NX EX, plus XADD for a key's first purchase,
// each awaited on its own. Dropping one, or pipelining them, would
// change every ratio with no test failing.
func TestNaiveIsTheSeedsThirteenRoundTrips(t *testing.T) {
	rdb := testredis.Start(t, testredis.Options{}).Client()
	ctx := context.Background()
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	h := &commandCount{single: map[string]int{}, piped: map[string]int{}}
	rdb.AddHook(h)
	const n, keys = 40, 4
	l, err := runNaive(config{Concurrency: 1, Reports: n, Keys: keys}, rdb, newWorkload())
	if err != nil || l.rec.acked != n || l.rec.calls != n || len(l.rec.latencies) != n {
		t.Fatalf("acked %d, calls %d, latencies %d, %v; want %d each", l.rec.acked, l.rec.calls, len(l.rec.latencies), err, n)
	}
	stats := rdb.Info(ctx, "commandstats").Val()
	want := map[string]int{"hincrby": n, "hsetnx": 10 * n, "expire": n, "set": n, "xadd": keys}
	for cmd, calls := range want {
		// As Redis counted them, and as the client sent them: one by one.
		if !regexp.MustCompile(fmt.Sprintf(`(?m)^cmdstat_%s:calls=%d,`, cmd, calls)).MatchString(stats) {
			t.Errorf("Redis counted %s not %d times:\n%s", cmd, calls, stats)
		}
		if h.single[cmd] != calls || h.piped[cmd] != 0 {
			t.Errorf("%s: %d sent on their own, %d pipelined; want %d, 0", cmd, h.single[cmd], h.piped[cmd], calls)
		}
	}
	// The clean-up's pipeline: the stream and each key. (go-redis's
	// CLIENT SETINFO at a connection's dial is pipelined too.)
	if h.piped["unlink"] != 1+keys {
		t.Errorf("pipelined %v, want the clean-up's %d UNLINKs", h.piped, 1+keys)
	}
}

// argsHook records the arguments of each command a client sends on its
// own, but for a connection's set-up (HELLO, CLIENT).
type argsHook struct {
	mu   sync.Mutex
	cmds [][]string
}

func (h *argsHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *argsHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "hello" || cmd.Name() == "client" {
			return next(ctx, cmd)
		}
		args := make([]string, len(cmd.Args()))
		for i, a := range cmd.Args() {
			args[i] = fmt.Sprint(a)
		}
		h.mu.Lock()
		h.cmds = append(h.cmds, args)
		h.mu.Unlock()
		return next(ctx, cmd)
	}
}

func (h *argsHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// Each command of a purchase carries the seed's arguments (seeds/000
// §4.2), not only its name: the hash's fields and EXPIRE 5 s, the lock's
// SET NX EX 3 s (without its TTL a key's entry would be added once a run,
// not once a window) and the stream entry's approximate MAXLEN 100000 and
// six fields.
func TestNaiveCommandsCarryTheSeedsArguments(t *testing.T) {
	ctx := context.Background()
	rdb := testredis.Start(t, testredis.Options{}).Client()
	h := &argsHook{}
	rdb.AddHook(h)
	wl := newWorkload()
	c := wl.contribution(wl.key(0))
	s := naiveStore{rdb: rdb, prefix: "naivebench:test:"}
	before := time.Now()
	if err := s.purchase(ctx, c); err != nil {
		t.Fatal(err)
	}
	agg, lock := s.aggKey(c), s.lockKey(c)
	str := func(v any) string { return fmt.Sprint(v) }
	want := [][]string{
		{"hincrby", agg, "quantity", str(c.Quantity)},
		{"hsetnx", agg, "activity_id", str(c.ActivityId)},
		{"hsetnx", agg, "user_id", str(c.UserId)},
		{"hsetnx", agg, "star_id", str(c.StarId)},
		{"hsetnx", agg, "item_id", str(c.ItemId)},
		{"hsetnx", agg, "item_name", c.ItemName},
		{"hsetnx", agg, "item_icon", c.ItemIcon},
		{"hsetnx", agg, "nickname", c.Nickname},
		{"hsetnx", agg, "avatar_url", c.AvatarUrl},
		{"hsetnx", agg, "first_id", str(c.Id)},
		{"hsetnx", agg, "first_created_at", str(c.CreatedAt)},
		{"expire", agg, "5"},
		{"set", lock, "1", "ex", "3", "nx"},
		{"xadd", s.stream(), "maxlen", "~", "100000", "*"},
	}
	if len(h.cmds) != len(want) {
		t.Fatalf("a key's first purchase sent %d commands, want %d: %q", len(h.cmds), len(want), h.cmds)
	}
	for i, w := range want {
		got := h.cmds[i]
		if i == len(want)-1 && len(got) > len(w) {
			got = got[:len(w)]
		}
		if !slices.Equal(got, w) {
			t.Errorf("command %d: %q, want %q", i+1, got, w)
		}
	}
	fields := map[string]string{}
	xadd := h.cmds[len(h.cmds)-1]
	for i := len(want[len(want)-1]); i+1 < len(xadd); i += 2 {
		fields[xadd[i]] = xadd[i+1]
	}
	expireAt, err := strconv.ParseInt(fields["expire_at_ms"], 10, 64)
	if err != nil || expireAt < before.Add(3*time.Second).UnixMilli() || expireAt > time.Now().Add(3*time.Second).UnixMilli() {
		t.Errorf("expire_at_ms %q, want the purchase's time + 3 s", fields["expire_at_ms"])
	}
	delete(fields, "expire_at_ms")
	wantFields := map[string]string{"activity_id": str(c.ActivityId), "user_id": str(c.UserId), "item_type": c.ItemType,
		"first_id": str(c.Id), "first_created_at": str(c.CreatedAt)}
	if !maps.Equal(fields, wantFields) {
		t.Errorf("stream entry %v, want %v and expire_at_ms", fields, wantFields)
	}
}

// A purchase whose Redis work failed is an error, not a purchase: naive's
// throughput (every ratio's denominator) counts acknowledged purchases
// only, and its latency figures count every purchase.
func TestNaiveCountsAFailedPurchaseAsAnError(t *testing.T) {
	// Nothing listens on port 1: each purchase fails at its first command.
	opts := redisOptions("127.0.0.1:1", 1)
	opts.MaxRetries = -1
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { _ = rdb.Close() })
	const n = 5
	l, err := runNaive(config{Concurrency: 1, Reports: n, Keys: 1}, rdb, newWorkload())
	if err == nil {
		t.Fatal("the clean-up of a Redis that refuses connections succeeded")
	}
	if r := l.rec; r.calls != n || r.errors != n || r.acked != 0 || len(r.latencies) != n || r.firstErr == nil {
		t.Fatalf("calls %d errors %d acked %d latencies %d first error %v; want %d, %d, 0, %d and an error",
			r.calls, r.errors, r.acked, len(r.latencies), r.firstErr, n, n, n)
	}
}
