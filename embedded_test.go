package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/combo-service/combo-service/conf"
	"github.com/combo-service/combo-service/internal/testwait"
	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/repo"
)

// A subscriber that stops reading (the logged redis-cli line suspended)
// is cut once Redis's 32 MB output limit is queued for it, and no PUBLISH
// waits on it meanwhile. miniredis writes a PUBLISH to each subscriber
// under its one global lock: once the socket's buffers were full the
// embedded Redis froze, every command with it, and stopping it hung; later
// each write had a second, so that it froze for that second.
func TestEmbeddedRedisCutsASubscriberThatStopsReading(t *testing.T) {
	core, logs := observer.New(zap.WarnLevel)
	addr, stop, err := startEmbedded(miniredis.NewMiniRedis(), "127.0.0.1:0", zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			stop()
		}
	})
	sub, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Close() })
	if _, err := sub.Write([]byte("*2\r\n$10\r\nPSUBSCRIBE\r\n$1\r\n*\r\n")); err != nil {
		t.Fatal(err)
	}
	// Read the subscription's confirmation, then nothing more.
	if line, err := bufio.NewReader(sub).ReadString('\n'); err != nil || !strings.HasPrefix(line, "*3") {
		t.Fatalf("PSUBSCRIBE answered %q, %v", line, err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: 10 * time.Second, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	ctx := context.Background()
	payload := strings.Repeat("x", 64<<10)
	start := time.Now()
	var slowest time.Duration
	sent := 0
	for ; ; sent++ {
		began := time.Now()
		n, err := rdb.Publish(ctx, "act:1:contributions", payload).Result()
		if err != nil {
			t.Fatalf("PUBLISH %d (%d MB sent) after %v: %v: the embedded Redis froze", sent, sent>>4, time.Since(start).Round(time.Millisecond), err)
		}
		slowest = max(slowest, time.Since(began))
		if n == 0 {
			break // the subscriber was cut
		}
		if time.Since(start) > 30*time.Second {
			t.Fatalf("the subscriber that reads nothing still took PUBLISH %d (%d MB) after 30 s", sent, sent>>4)
		}
	}
	// Waiting on the subscriber, one PUBLISH took a second; queued, each
	// takes a millisecond or so, but under -race with one P beside two
	// processes keeping the machine busy the scheduler and the collector
	// stretch one to a few hundred (363 ms seen with the queue in chunks;
	// 760 ms when its growth copied it whole under miniredis's lock).
	// 900 ms leaves that room and still tells a PUBLISH that waited its
	// second.
	if slowest > 900*time.Millisecond {
		t.Errorf("the slowest PUBLISH took %v: it waited on the subscriber that reads nothing", slowest)
	}
	if sent < 32<<4 {
		t.Errorf("cut after %d MB, before Redis's 32 MB output limit", sent>>4)
	}
	// Cut at the first PUBLISH that finds the limit queued: the warning
	// names the client an operator is to find, and what was queued, from
	// the limit to one payload past it.
	if cut := logs.FilterMessageSnippet("cut a subscriber that fell behind").All(); len(cut) != 1 {
		t.Errorf("logged %d warnings of the cut, want 1: %v", len(cut), logs.All())
	} else if q := cut[0].ContextMap()["queued_bytes"]; q.(int64) < 32<<20 || q.(int64) >= 32<<20+int64(len(payload)) {
		t.Errorf("the warning says %v bytes were queued, want the limit (32 MiB), or less than a payload more", q)
	} else if c := cut[0].ContextMap()["client"]; c != sub.LocalAddr().String() {
		t.Errorf("the warning names client %v, want the subscriber %s", c, sub.LocalAddr())
	}
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after the subscriber was cut: %v", err)
	}
	done := make(chan struct{})
	go func() { stop(); close(done) }()
	select {
	case <-done:
		stopped = true
	case <-time.After(10 * time.Second):
		t.Fatal("the embedded Redis did not stop within 10 s")
	}
}

// A client that reads a reply larger than the socket's buffers slowly,
// but reads on, is not cut: a reply is queued whole, however large.
func TestEmbeddedRedisKeepsASlowReader(t *testing.T) {
	readSlowly(t, 16<<20, 1) // 16 MB at 1 MB every 100 ms: 1.6 s
}

// An ordinary client (no subscriber) that pipelines 48 GETs of 1 MB and
// reads the replies on, 1 MB every 100 ms, is not cut: Redis's limit for
// normal clients is none (client-output-buffer-limit normal 0 0 0); the
// pubsub class's 32 MB is for subscribers.
func TestEmbeddedRedisKeepsASlowPipelineReader(t *testing.T) {
	readSlowly(t, 1<<20, 48)
}

// readSlowly sends the embedded Redis n GETs, pipelined, of a value of
// size bytes, and reads the replies 1 MB every 100 ms through a small
// receive buffer, failing t if the connection is cut before the end.
func readSlowly(t *testing.T, size, n int) {
	t.Helper()
	addr, stop, err := startEmbedded(miniredis.NewMiniRedis(), "127.0.0.1:0", zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { rdb.Close() })
	if err := rdb.Set(ctx, "v", strings.Repeat("x", size), 0).Err(); err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if err := conn.(*net.TCPConn).SetReadBuffer(64 << 10); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write([]byte(strings.Repeat("*2\r\n$3\r\nGET\r\n$1\r\nv\r\n", n))); err != nil {
		t.Fatal(err)
	}
	want := n * (size + len(fmt.Sprintf("$%d\r\n\r\n", size)))
	buf := make([]byte, 1<<20)
	for got := 0; got < want; {
		if err := conn.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
			t.Fatal(err)
		}
		k, err := io.ReadFull(conn, buf[:min(len(buf), want-got)])
		got += k
		if err != nil {
			t.Fatalf("after %d of %d bytes: %v: a client reading on was cut", got, want, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// The embedded Redis runs the service's own scripts and no other: miniredis
// gives scripts loadfile, dofile and print and no time bound, so any client
// could read the host's files, forge log lines or hang the service for good.
func TestEmbeddedRedisRunsOnlyTheServicesScripts(t *testing.T) {
	addr, stop, err := startEmbedded(miniredis.NewMiniRedis(), "127.0.0.1:0", zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { rdb.Close() })
	ctx := context.Background()
	refused := func(what string, err error) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), "runs only the service's own scripts") {
			t.Errorf("%s: %v, want refused", what, err)
		}
	}
	refused("EVAL of loadfile", rdb.Eval(ctx, "return tostring(select(2, loadfile('/etc/hostname')))", nil).Err())
	refused("EVAL of an endless loop", rdb.Eval(ctx, "while true do end", nil).Err())
	refused("EVAL_RO of loadfile", rdb.EvalRO(ctx, "return tostring(select(2, loadfile('/etc/hostname')))", nil).Err())
	refused("EVALSHA of another script", rdb.EvalSha(ctx, "e0e1f9fabfc9d4800c877a703b823ac0578ff8db", nil).Err())
	refused("SCRIPT LOAD of another script", rdb.ScriptLoad(ctx, "return 1").Err())
	refused("SCRIPT FLUSH", rdb.ScriptFlush(ctx).Err())
	// One with no script is refused too: the hook reads the script before
	// miniredis checks the arguments' count, and a panic there, in
	// miniredis's goroutine of the connection, would end the service.
	for _, cmd := range [][]any{{"EVAL"}, {"EVAL_RO"}, {"EVALSHA"}, {"EVALSHA_RO"}, {"SCRIPT"}, {"SCRIPT", "LOAD"}} {
		refused(fmt.Sprint(cmd), rdb.Do(ctx, cmd...).Err())
	}

	// The service's own run: loaded, then by EVALSHA and by EVAL.
	r := repo.New(rdb, repo.Settings{Window: time.Second, Grace: 100 * time.Millisecond, Dedupe: time.Minute,
		Stale: time.Minute, Timeout: time.Second, Shards: 1, StreamMaxLen: 100000})
	if err := r.LoadScripts(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Time(ctx, 0); err != nil {
		t.Fatalf("the service's own clock script: %v", err)
	}
	if err := rdb.ScriptFlush(ctx).Err(); err == nil {
		t.Fatal("SCRIPT FLUSH ran")
	}
	if err := r.EnsureGroups(ctx); err != nil {
		t.Fatal(err)
	}
	c := &combo.Contribution{Id: 1, ActivityId: 7, UserId: 42, ItemId: 3, ItemType: "rose", Quantity: 1, CreatedAt: time.Now().UnixMilli()}
	if res, err := r.Report(ctx, []*combo.Contribution{c}); err != nil || res[0].Outcome != repo.Opened {
		t.Fatalf("a report on the embedded Redis: %+v %v", res, err)
	}
}

// The embedded Redis counts TTLs down a tick at a time, so its keys may
// expire up to a tick early: the repo is told, and tells a window's data
// expired in that tick from data deleted (lost). A Redis server is not.
func TestRepoKnowsTheEmbeddedRedisExpiresEarly(t *testing.T) {
	cfg := conf.Default()
	if got := repoSettings(cfg).ExpiresEarly; got != embeddedTTLTick {
		t.Fatalf("embedded Redis: ExpiresEarly %v, want the TTL tick %v", got, embeddedTTLTick)
	}
	cfg.Redis.Addr = "127.0.0.1:6379"
	if got := repoSettings(cfg).ExpiresEarly; got != 0 {
		t.Fatalf("a Redis server: ExpiresEarly %v, want 0", got)
	}
}

// EVALSHA of the service's own script is taken whatever the hash's case,
// as Redis takes it (mutant: compared case-sensitively, refused as
// another script).
func TestEmbeddedRedisTakesItsScriptsHashInUpperCase(t *testing.T) {
	addr, stop, err := startEmbedded(miniredis.NewMiniRedis(), "127.0.0.1:0", zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	for sha := range repo.ScriptHashes() {
		err := rdb.EvalSha(context.Background(), strings.ToUpper(sha), nil).Err()
		if err != nil && strings.Contains(err.Error(), "runs only the service's own scripts") {
			t.Fatalf("EVALSHA %s: %v", strings.ToUpper(sha), err)
		}
	}
}

// Stopping the embedded Redis with several clients that read nothing, each
// with output queued, takes about closeFlushTimeout in all, not one per
// client (miniredis's Server.Close closes its peers one after another,
// under its lock).
func TestEmbeddedRedisStopsWithStalledSubscribersWithinTheFlushTimeout(t *testing.T) {
	addr, stop, err := startEmbedded(miniredis.NewMiniRedis(), "127.0.0.1:0", zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	const n = 5
	for range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if err := c.(*net.TCPConn).SetReadBuffer(16 << 10); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write([]byte("*2\r\n$9\r\nSUBSCRIBE\r\n$2\r\nch\r\n")); err != nil {
			t.Fatal(err)
		}
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	ctx := context.Background()
	testwait.For(t, "every client subscribed", func() bool { return rdb.PubSubNumSub(ctx, "ch").Val()["ch"] == n })
	payload := strings.Repeat("x", 64<<10)
	for range 160 { // 10 MB to each, under the 32 MB limit
		if err := rdb.Publish(ctx, "ch", payload).Err(); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	stop()
	if took := time.Since(start); took > closeFlushTimeout+time.Second {
		t.Fatalf("stop took %v with %d stalled subscribers, want about closeFlushTimeout (%v) in all", took, n, closeFlushTimeout)
	}
}
