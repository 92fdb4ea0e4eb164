package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/combo-service/combo-service/conf"
	"github.com/combo-service/combo-service/internal/testredis"
)

// Tests pinning what a mutation sweep of the Sentinel checks found loose:
// each fails with the mutant its comment names.

// hungSentinel answers the master lookup (127.0.0.1:1, where nothing
// listens), PING, and SENTINEL REPLICAS with replicas (a RESP reply), and
// never answers SUBSCRIBE.
func hungSentinel(t *testing.T, replicas string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	serve := func(c net.Conn) {
		defer wg.Done()
		r := bufio.NewReader(c)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			var n int
			_, _ = fmt.Sscanf(line, "*%d", &n)
			var args []string
			for range n {
				_, _ = r.ReadString('\n') // $len
				a, _ := r.ReadString('\n')
				args = append(args, strings.TrimSpace(a))
			}
			if len(args) == 0 {
				continue
			}
			switch strings.ToUpper(args[0]) {
			case "SENTINEL":
				if len(args) > 1 && strings.EqualFold(args[1], "replicas") {
					_, _ = c.Write([]byte(replicas))
				} else {
					_, _ = c.Write([]byte("*2\r\n$9\r\n127.0.0.1\r\n$1\r\n1\r\n"))
				}
			case "SUBSCRIBE": // never answered
			case "PING":
				_, _ = c.Write([]byte("+PONG\r\n"))
			default:
				_, _ = c.Write([]byte("-ERR unknown command\r\n"))
			}
		}
	}
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			wg.Add(1)
			mu.Unlock()
			go serve(c)
		}
	})
	return ln.Addr().String()
}

// A Sentinel that answers the master lookup and then never answers
// SUBSCRIBE is given up within the check's own time, and named: go-redis
// gives a subscription's first reply no read timeout of its own, so the
// start hung behind it (mutant: the check's timeout dropped).
func TestSentinelCheckOutlastsAHungSubscribe(t *testing.T) {
	core, logs := observer.New(zap.WarnLevel)
	r := conf.Default().Redis
	r.Timeout = 200 * time.Millisecond
	r.SentinelAddrs, r.SentinelMaster = []string{hungSentinel(t, "*0\r\n")}, "combo"
	done := make(chan struct{})
	go func() { checkSentinels(context.Background(), r, nil, zap.New(core)); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("checkSentinels still waiting on a Sentinel's SUBSCRIBE after 10 s (redis.timeout 200 ms)")
	}
	if logs.FilterMessageSnippet("could not try a subscription").Len() != 1 {
		t.Errorf("logged %v, want the failed subscription named", logs.All())
	}
}

// The Sentinels are checked at once: three that hang take one check's
// time, not three (mutant: checked one after another).
func TestSentinelsAreCheckedAtOnce(t *testing.T) {
	r := conf.Default().Redis
	r.Timeout = 400 * time.Millisecond
	r.SentinelAddrs, r.SentinelMaster = []string{hungSentinel(t, "*0\r\n"), hungSentinel(t, "*0\r\n"), hungSentinel(t, "*0\r\n")}, "combo"
	start := time.Now()
	checkSentinels(context.Background(), r, nil, zap.NewNop())
	if took := time.Since(start); took > 2*sentinelCheckTime*r.Timeout {
		t.Fatalf("3 hung Sentinels took %v to check, want about %v", took, sentinelCheckTime*r.Timeout)
	}
}

// A Sentinel that knows no master of that name is logged as an error:
// every report would fail (mutant: at warn).
func TestUnknownSentinelMasterIsAnError(t *testing.T) {
	master := testredis.Start(t, testredis.Options{})
	sentinel := testredis.StartSentinel(t, sentinelMaster, master)
	core, logs := observer.New(zap.DebugLevel)
	r := conf.Default().Redis
	r.SentinelAddrs, r.SentinelMaster = []string{sentinel.Addr}, "no-such-master"
	checkSentinels(context.Background(), r, nil, zap.New(core))
	got := logs.FilterMessageSnippet("knows no master of that name").All()
	if len(got) != 1 || got[0].Level != zapcore.ErrorLevel {
		t.Fatalf("logged %v, want one error", logs.All())
	}
}

// A replica the Sentinels list as disconnected is not asked, and named
// so (mutant: the disconnected flag ignored).
func TestSentinelReadSkipsADisconnectedReplica(t *testing.T) {
	bulk := func(s string) string { return fmt.Sprintf("$%d\r\n%s\r\n", len(s), s) }
	replica := "*1\r\n*6\r\n" + bulk("ip") + bulk("127.0.0.1") + bulk("port") + bulk("1") + bulk("flags") + bulk("slave,disconnected")
	r := conf.Default().Redis
	r.Timeout = 200 * time.Millisecond
	r.SentinelAddrs, r.SentinelMaster = []string{hungSentinel(t, replica)}, "combo"
	_, _, err := sentinelRead(context.Background(), r, nil, func(ctx context.Context, c *redis.Client) (string, error) {
		return c.Ping(ctx).Result()
	})
	if err == nil || !strings.Contains(err.Error(), "replica 127.0.0.1:1: not asked, down as the Sentinels see it") {
		t.Fatalf("sentinelRead: %v; want the disconnected replica named as not asked", err)
	}
}
