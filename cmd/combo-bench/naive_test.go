package main

import (
	"context"
	"fmt"
	"regexp"
	"sync"
	"testing"

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
	if err != nil || l.rec.acked != n {
		t.Fatalf("acked %d, %v; want %d", l.rec.acked, err, n)
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
