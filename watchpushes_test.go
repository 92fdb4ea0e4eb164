package main

import (
	"context"
	"net"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/combo-service/combo-service/conf"
	"github.com/combo-service/combo-service/metrics"
)

// The watch_pushes hint names the host when redis-cli's default,
// 127.0.0.1, would not reach the embedded Redis: on
// redis.embedded_addr 127.0.0.2:port it said "redis-cli --raw -p port",
// which connects to 127.0.0.1.
func TestWatchPushesHintNamesAHostOtherThanLoopback(t *testing.T) {
	for addr, want := range map[string]string{
		"127.0.0.1:26405":  "26405",
		"localhost:26405":  "26405",
		":26405":           "26405",
		"0.0.0.0:26405":    "26405",
		"[::]:26405":       "26405",
		"127.0.0.2:26405":  "26405 -h 127.0.0.2",
		"[::1]:26405":      "26405 -h ::1",
		"10.1.2.3:26405":   "26405 -h 10.1.2.3",
		"redis.local:6379": "6379 -h redis.local",
	} {
		if got := portOf(addr); got != want {
			t.Errorf("portOf(%q) = %q, want %q", addr, got, want)
		}
	}

	// The hint as logged, on an embedded Redis on 127.0.0.2, reaches it.
	if ln, err := net.Listen("tcp", "127.0.0.2:0"); err != nil {
		t.Skipf("no 127.0.0.2 here: %v", err)
	} else {
		ln.Close()
	}
	cfg := conf.Default()
	cfg.Redis.EmbeddedAddr = "127.0.0.2:0"
	core, logs := observer.New(zap.WarnLevel)
	addr, _, closeAll, err := openRedis(cfg, zap.New(core), prometheus.NewRegistry(), metrics.New(prometheus.NewRegistry()))
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll()
	_, port, _ := net.SplitHostPort(addr)
	warned := logs.FilterFieldKey("watch_pushes").All()
	if len(warned) != 1 {
		t.Fatalf("logged %v, want one line with watch_pushes", logs.All())
	}
	hint := warned[0].ContextMap()["watch_pushes"].(string)
	if want := "redis-cli --raw -p " + port + " -h 127.0.0.2 psubscribe 'act:*:contributions'"; hint != want {
		t.Fatalf("watch_pushes %q, want %q", hint, want)
	}
	// What -h and -p name answers.
	f := strings.Fields(hint)
	rdb := redis.NewClient(&redis.Options{Addr: net.JoinHostPort(f[5], f[3])})
	defer rdb.Close()
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("the hint's -h %s -p %s: %v", f[5], f[3], err)
	}
}
