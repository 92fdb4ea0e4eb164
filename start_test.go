package main

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/combo-service/combo-service/conf"
	"github.com/combo-service/combo-service/internal/testredis"
)

// A port taken at start is a failure to start, logged as one and without
// a stacktrace: it was logged "combo-service stopped with an error", with
// main's stack, right after the embedded Redis's start-up warning.
func TestPortInUseIsLoggedAsAFailureToStart(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	// The RPC port, then the metrics port, then the embedded Redis's, taken.
	free := "127.0.0.1:0"
	for _, addrs := range [][3]string{{taken.Addr().String(), free, free}, {free, taken.Addr().String(), free}, {free, free, taken.Addr().String()}} {
		cfg := conf.Default() // the embedded Redis
		cfg.Server.Addr, cfg.Metrics.Addr, cfg.Redis.EmbeddedAddr = addrs[0], addrs[1], addrs[2]
		done := make(chan error, 1)
		go func() { done <- run(context.Background(), cfg, testLogger(t), nil) }()
		select {
		case err = <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("run still starting 10 s after failing to listen on %s", taken.Addr())
		}
		if err == nil || !errors.As(err, new(startError)) || !strings.Contains(err.Error(), taken.Addr().String()) {
			t.Fatalf("server.addr %s, metrics.addr %s, redis.embedded_addr %s: run returned %v, want a startError naming %s", addrs[0], addrs[1], addrs[2], err, taken.Addr())
		}
	}

	// As production's logger does, with a stacktrace at error level.
	core, logs := observer.New(zap.InfoLevel)
	log := zap.New(core, zap.AddStacktrace(zap.ErrorLevel))
	stopErr := errors.New("drain reports in flight: context deadline exceeded")
	logRunError(log, err)
	logRunError(log, stopErr)
	got := logs.All()
	if len(got) != 2 || got[0].Message != "combo-service failed to start" || got[1].Message != "combo-service stopped with an error" {
		t.Fatalf("logged %v, want a failure to start, then an error of the stop", got)
	}
	for i, e := range got {
		if e.Level != zap.ErrorLevel || e.Stack != "" {
			t.Errorf("%q logged at %s with stack %q, want error level, no stack", e.Message, e.Level, e.Stack)
		}
		// What failed, or why the stop was cut short: the line's only news.
		if want := []error{err, stopErr}[i].Error(); e.ContextMap()["error"] != want {
			t.Errorf("%q logged error %q, want %q", e.Message, e.ContextMap()["error"], want)
		}
	}
}

// A signal during start-up (here before run begins) stops the service
// before it serves: run returns nil and both ports are free. Kitex, handed
// a ctx already ended, shut down before its listener was set up and then
// served on the port until the process exited.
func TestStopDuringStartServesNothing(t *testing.T) {
	r := testredis.Start(t, testredis.Options{})
	free := func() string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return l.Addr().String()
	}
	cfg := conf.Default()
	cfg.Server.Addr, cfg.Metrics.Addr, cfg.Redis.Addr, cfg.Worker.Consumer = free(), free(), r.Addr, t.Name()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	done := make(chan error, 1)
	go func() { done <- run(ctx, cfg, testLogger(t), nil) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return after a signal during start-up")
	}
	for _, addr := range []string{cfg.Server.Addr, cfg.Metrics.Addr} {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			t.Errorf("%s still accepts after run returned", addr)
		}
	}
}
