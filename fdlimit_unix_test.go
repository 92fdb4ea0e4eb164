//go:build unix

package main

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/combo-service/combo-service/conf"
)

// The start warns when the open-file limit cannot hold
// server.max_connections and the Redis connections (README's
// server.max_connections row), naming both, the limit and what is needed;
// and says nothing once server.max_connections fits. It runs in a child
// process of this test binary: it lowers the process's descriptor limit.
func TestStartWarnsOfAnOpenFileLimitTooLow(t *testing.T) {
	if runInChild(t, "COMBO_TEST_FDLIMIT", 2*time.Minute) {
		return
	}
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		t.Skip(err)
	}
	low := rl
	low.Cur = 512
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Skip(err)
	}
	defer syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl) //nolint:errcheck // the child ends next

	start := func(maxConns int) *observer.ObservedLogs {
		t.Helper()
		cfg := conf.Default() // the embedded Redis
		cfg.Server.Addr, cfg.Metrics.Addr = "127.0.0.1:0", "127.0.0.1:0"
		cfg.Server.MaxConnections = maxConns
		cfg.Redis.PoolSize = 20
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		core, logs := observer.New(zapcore.WarnLevel)
		ctx, cancel := context.WithCancel(context.Background())
		ready, done := make(chan started, 1), make(chan error, 1)
		go func() { done <- run(ctx, cfg, zap.New(core), ready) }()
		st := awaitStart(t, ready, done) // the start's warnings are logged before it signals
		// Stopped only once Kitex serves: a stop during its start races
		// inside Kitex v0.16.3 (see waitServing).
		(&service{t: t, rpc: newRPC(t, st.RPCAddr)}).waitServing()
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("run: %v", err)
		}
		return logs
	}

	// 10000 + 2 x (20 + 20 + 2 x 10) on the embedded Redis + 64 > 512.
	lines := start(10_000).FilterMessageSnippet("open-file limit (RLIMIT_NOFILE) is below").All()
	if len(lines) != 1 {
		t.Fatalf("%d open-file limit warnings at start with 512 open files and server.max_connections 10000, want 1", len(lines))
	}
	got := lines[0].ContextMap()
	for field, want := range map[string]string{"server_max_connections": "10000", "redis_connections": "120",
		"open_file_limit": "512", "open_files_needed": "10184"} {
		if v := fmt.Sprint(got[field]); v != want {
			t.Errorf("warning's %s = %s, want %s (fields %v)", field, v, want, got)
		}
	}
	for _, says := range []string{"lower server.max_connections", "ulimit -n", "--ulimit nofile=", "LimitNOFILE"} {
		if !strings.Contains(lines[0].Message, says) {
			t.Errorf("warning does not say %q: %s", says, lines[0].Message)
		}
	}
	// 300 + 120 + 64 fits.
	if n := start(300).FilterMessageSnippet("open-file limit").Len(); n != 0 {
		t.Errorf("%d open-file limit warnings with server.max_connections 300, want none", n)
	}
}
