package main

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/combo-service/combo-service/conf"
	"github.com/combo-service/combo-service/metrics"
	"github.com/combo-service/combo-service/repo"
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
	resp, err := httpGet("http://" + s.addrs.MetricsAddr + "/debug/pprof/")
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

// Every repo setting is the configured one, each given a value of its own
// so that one wired from another's key shows, on the report path's repo
// and the worker's alike (mutants: window.grace, window.dedupe or
// redis.shards left out, the repo's zero taken instead, and every test
// still passing).
func TestRepoSettingsAreTheConfigured(t *testing.T) {
	cfg := conf.Default()
	cfg.Redis.Addr = "10.0.0.1:6379"
	cfg.Window = conf.Window{Size: 1700 * time.Millisecond, Grace: 300 * time.Millisecond, Dedupe: 41 * time.Second, Stale: 37 * time.Second}
	cfg.Redis.Timeout, cfg.Redis.Shards, cfg.Redis.StreamMaxLen = 700*time.Millisecond, 6, 123_456
	got := repoSettings(cfg)
	want := repo.Settings{Window: 1700 * time.Millisecond, Grace: 300 * time.Millisecond, Dedupe: 41 * time.Second, Stale: 37 * time.Second,
		Timeout: 700 * time.Millisecond, Shards: 6, StreamMaxLen: 123_456}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("repoSettings = %+v\nwant           %+v", got, want)
	}
	path := reportPathSettings(got, metrics.New(prometheus.NewRegistry()), zap.NewNop())
	path.ObservePipeline, path.OnPanic = nil, nil
	if !reflect.DeepEqual(path, want) {
		t.Fatalf("reportPathSettings = %+v\nwant                 %+v", path, want)
	}
}

// The start line names what this replica runs: which build, where it
// listens, which Redis, as which consumer, and the window rule an
// operator compares across replicas, each field as configured.
func TestStartLineNamesWhatItRuns(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	s := startService(t, options{log: zap.New(core), mutate: func(c *conf.Config) { c.Redis.Shards = 3 }})
	lines := logs.FilterMessage("combo-service started").All()
	if len(lines) != 1 {
		t.Fatalf("logged %d start lines, want 1", len(lines))
	}
	version, revision := buildVersion()
	want := map[string]any{
		"version": version, "revision": revision, "rpc_addr": s.addrs.RPCAddr, "redis": s.cfg.Redis.Addr, "redis_tls": false,
		"metrics_addr": s.addrs.MetricsAddr, "consumer": t.Name(), "window_size": testWindow, "window_grace": testGrace, "shards": int64(3),
	}
	got := lines[0].ContextMap()
	for k, v := range want {
		if !reflect.DeepEqual(got[k], v) {
			t.Errorf("start line's %s = %v (%T), want %v", k, got[k], got[k], v)
		}
	}
}

// /healthz answers ok while the process runs: the image's HEALTHCHECK
// (-healthcheck /healthz) probes it, and a 404 there marks every replica
// unhealthy.
func TestHealthzAnswersOK(t *testing.T) {
	s := startService(t, options{})
	resp, err := httpGet("http://" + s.addrs.MetricsAddr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "ok\n" {
		t.Fatalf("/healthz: %d %q, want 200 ok", resp.StatusCode, body)
	}
}
