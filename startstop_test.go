package main

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/combo-service/combo-service/conf"
	"github.com/combo-service/combo-service/internal/testredis"
)

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
