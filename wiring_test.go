package main

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/combo-service/combo-service/conf"
	"github.com/combo-service/combo-service/worker"
)

// Each setting reaches what it configures: tests a mutation sweep of
// run's wiring found missing (a setting ignored, a check dropped, and
// every test still passing).

// /readyz reads Redis: with it down the replica is not ready.
func TestReadyzFailsWhileRedisIsDown(t *testing.T) {
	s := startService(t, options{mutate: func(c *conf.Config) { c.Redis.Timeout = 300 * time.Millisecond }})
	if code, body := readyz(t, s); code != http.StatusOK {
		t.Fatalf("/readyz with Redis up: %d %s", code, body)
	}
	s.redis.Kill()
	defer s.redis.Start()
	if code, body := readyz(t, s); code != http.StatusServiceUnavailable || !strings.Contains(body, "redis") {
		t.Fatalf("/readyz with Redis down: %d %q, want 503 naming redis", code, body)
	}
}

// server.shutdown_timeout bounds the drain: a window due in 20 s does
// not hold a stop configured for 500 ms (plus Kitex's exit wait of 2 s).
func TestShutdownTimeoutBoundsTheDrain(t *testing.T) {
	s := startService(t, options{mutate: func(c *conf.Config) {
		c.Window.Size, c.Window.Stale, c.Window.Dedupe = 20*time.Second, time.Minute, time.Minute
		c.Worker.ClaimIdle = conf.DefaultClaimIdle(c.Window)
		c.Server.ShutdownTimeout = 500 * time.Millisecond
	}})
	s.report(gift(newActivity(), 1, "firework", 1))
	start := time.Now()
	err := s.stop()
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("stop took %s with server.shutdown_timeout 500ms", d)
	}
	if err == nil || !strings.Contains(err.Error(), "still held") {
		t.Fatalf("run returned %v, want the held window named", err)
	}
}

// /debug/pprof/ is served only with metrics.pprof (README: off by default,
// not for the open network).
func TestPprofIsOffByDefault(t *testing.T) {
	s := startService(t, options{})
	resp, err := http.Get("http://" + s.addrs.MetricsAddr + "/debug/pprof/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("/debug/pprof/ with metrics.pprof off: %d, want 404", resp.StatusCode)
	}
}

// The start logs Config.Warnings (README: "a warning at start says ...").
func TestStartLogsTheConfigWarnings(t *testing.T) {
	core, logs := observer.New(zapcore.WarnLevel)
	startService(t, options{log: zap.New(core), mutate: func(c *conf.Config) {
		c.Server.ShutdownTimeout = 100 * time.Millisecond // below W + grace
	}})
	if logs.FilterMessageSnippet("server.shutdown_timeout (100ms) is shorter").Len() == 0 {
		t.Fatalf("no start warning about server.shutdown_timeout; logged: %v", logs.All())
	}
}

// A connection to the metrics port that never sends a request is cut
// (ReadHeaderTimeout), so it cannot hold a descriptor for good.
func TestMetricsPortCutsAConnectionThatSendsNothing(t *testing.T) {
	s := startService(t, options{})
	c, err := net.Dial("tcp", s.addrs.MetricsAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(8 * time.Second))
	_, err = c.Read(make([]byte, 1))
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("a connection that sent nothing was still open after 8 s")
	}
}

// worker.block, worker.read_count and worker.claim_idle reach Redis as
// configured (XREADGROUP ... COUNT n BLOCK ms, XAUTOCLAIM ... min-idle).
func TestWorkerSettingsReachRedis(t *testing.T) {
	s := startService(t, options{mutate: func(c *conf.Config) {
		c.Worker.Block, c.Worker.ReadCount, c.Worker.ClaimIdle = 150*time.Millisecond, 7, 1234*time.Millisecond
	}})
	conn, err := net.Dial("tcp", s.redis.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("MONITOR\r\n")); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(4 * time.Second))
	want := map[string]bool{`"COUNT" "7" "BLOCK" "150"`: false, `"1234"`: false}
	r := bufio.NewReader(conn)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Log(err)
			}
			break
		}
		up := strings.ToUpper(line)
		seen := 0
		for w := range want {
			if (strings.Contains(up, `"XREADGROUP"`) || strings.Contains(up, `"XAUTOCLAIM"`)) && strings.Contains(up, w) {
				want[w] = true
			}
			if want[w] {
				seen++
			}
		}
		if seen == len(want) {
			break
		}
	}
	for w, seen := range want {
		if !seen {
			t.Errorf("no XREADGROUP/XAUTOCLAIM carrying %s within 4 s", w)
		}
	}
}

// server.max_connections reaches the RPC server: past it, a connection
// is closed as it is accepted.
func TestMaxConnectionsIsTheConfigured(t *testing.T) {
	s := startService(t, options{mutate: func(c *conf.Config) { c.Server.MaxConnections = 2 }})
	// s.rpc may hold a connection already (waitServing); fill the rest.
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for range 3 {
		c, err := net.Dial("tcp", s.addrs.RPCAddr)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	last := held[len(held)-1]
	_ = last.SetReadDeadline(time.Now().Add(3 * time.Second))
	_, err := last.Read(make([]byte, 1))
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("a connection past server.max_connections 2 was kept open")
	}
}

// Every worker setting is the configured one, each given a value of its
// own so that one wired from another's key shows.
func TestWorkerConfigIsTheConfigured(t *testing.T) {
	cfg := conf.Default()
	cfg.Worker = conf.Worker{Consumer: "replica-7", ClaimIdle: 4100 * time.Millisecond, ConsumerIdleDelete: 3 * time.Hour,
		ReadCount: 17, BatchSize: 23, Block: 1300 * time.Millisecond}
	cfg.Redis.Shards = 5
	cfg.Window.Stale = 9 * time.Second
	want := worker.Config{Consumer: "replica-7", Shards: 5, ClaimIdle: 4100 * time.Millisecond, Stale: 9 * time.Second,
		ReadCount: 17, BatchSize: 23, Block: 1300 * time.Millisecond, ConsumerIdleDelete: 3 * time.Hour}
	if got := workerConfig(cfg); got != want {
		t.Fatalf("workerConfig = %+v\nwant          %+v", got, want)
	}
	cfg.Redis.Addrs = []string{"10.0.0.1:7000"}
	if !workerConfig(cfg).NodePerShard {
		t.Fatal("on a Redis Cluster (redis.addrs) the worker does not follow each shard's node")
	}
}
