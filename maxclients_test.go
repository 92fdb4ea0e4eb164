package main

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/combo-service/combo-service/conf"
	"github.com/combo-service/combo-service/handler"
	"github.com/combo-service/combo-service/internal/testredis"
	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/metrics"
	"github.com/combo-service/combo-service/repo"
)

// fillRedis makes Redis refuse every new connection as it does at its
// maxclients: admin's own connection (and the test's subscriber, a
// pub/sub client) stay, every other client's is closed, and maxclients is
// set below what is left. It returns a func that takes connections again.
func fillRedis(t *testing.T, admin *redis.Client) (reopen func()) {
	t.Helper()
	ctx := context.Background()
	if err := admin.Ping(ctx).Err(); err != nil { // admin's connection, made before the limit
		t.Fatal(err)
	}
	if err := admin.ConfigSet(ctx, "maxclients", "1").Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.Do(ctx, "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes").Err(); err != nil {
		t.Fatal(err)
	}
	reopen = func() {
		if err := admin.ConfigSet(ctx, "maxclients", "10000").Err(); err != nil {
			t.Error(err)
		}
	}
	t.Cleanup(reopen) // before a service's stop, registered earlier: its drain needs Redis
	return reopen
}

// A Redis at its maxclients accepts a connection, writes "ERR max number
// of clients reached" and closes it. go-redis took that reply for a Redis
// without HELLO and went on, so the cause was lost: the command after it
// failed with "write: broken pipe", "EOF" or "connection reset by peer",
// in every log line, /readyz's reason and each caller's UNAVAILABLE, which
// send an operator looking at the network. Through the service's clients
// (openRedis), the error names it, still counted unavailable.
func TestMaxClientsRefusalNamed(t *testing.T) {
	for _, tc := range []struct {
		name string
		tls  bool
	}{{"plain", false}, {"tls", true}} {
		t.Run(tc.name, func(t *testing.T) {
			srv := testredis.Start(t, testredis.Options{TLS: tc.tls})
			cfg := conf.Default()
			cfg.Redis.Addr = srv.Addr
			dialTLS(&cfg, srv.TLS)
			_, newClient, closeAll, err := openRedis(cfg, testLogger(t), prometheus.NewRegistry(), metrics.New(prometheus.NewRegistry()))
			if err != nil {
				t.Fatal(err)
			}
			defer closeAll()
			reopen := fillRedis(t, srv.Client())
			store := repo.New(newClient(0), repoSettings(cfg))
			err = store.Ready(context.Background())
			if err == nil || !errors.Is(err, repo.ErrUnavailable) || !strings.Contains(err.Error(), "max number of clients reached") {
				t.Fatalf("Ready with Redis at its maxclients = %v, want ErrUnavailable naming \"max number of clients reached\"", err)
			}
			t.Log(err)
			reopen()
			// New connections fail at once for maxClientsHold after a
			// refusal, and go-redis's breaker may wait a second more.
			deadline := time.Now().Add(maxClientsHold + 3*time.Second)
			for err = store.Ready(context.Background()); err != nil && time.Now().Before(deadline); err = store.Ready(context.Background()) {
				time.Sleep(50 * time.Millisecond)
			}
			if err != nil {
				t.Fatalf("Ready once Redis takes connections again: %v", err)
			}
		})
	}
}

// A report that needs a connection Redis refuses at its maxclients fails
// UNAVAILABLE, its message naming the cause, and is counted once Redis
// takes connections again.
func TestMaxClientsReportUnavailable(t *testing.T) {
	s := startService(t, options{})
	reopen := fillRedis(t, s.redis.Client())
	c := gift(newActivity(), 1, "firework", 1)
	_, err := s.rpc.ReportContribution(context.Background(), &combo.ReportContributionRequest{Contribution: c})
	var ce *combo.ComboError
	if !errors.As(err, &ce) || ce.Code != handler.CodeUnavailable || !strings.Contains(ce.Message, "max number of clients reached") {
		t.Fatalf("report while Redis is at its maxclients: %v, want UNAVAILABLE naming \"max number of clients reached\"", err)
	}
	reopen()
	deadline := time.Now().Add(maxClientsHold + 3*time.Second)
	resp, err := s.rpc.ReportContribution(context.Background(), &combo.ReportContributionRequest{Contribution: c})
	for ; err != nil && time.Now().Before(deadline); resp, err = s.rpc.ReportContribution(context.Background(), &combo.ReportContributionRequest{Contribution: c}) {
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil || resp.Duplicate || resp.WindowQuantity != 1 {
		t.Fatalf("the report sent again once Redis takes connections: %+v, %v; want counted once", resp, err)
	}
}

// Each connection Redis refuses at its maxclients is one it accepted and
// closed. go-redis's breaker, which spaces dials that fail, does not see
// these (the dial connected), so every call needing a connection dialed
// one: about 1,500 a second from one replica under 16 callers, against a
// Redis already full. After a refusal, dials to it wait maxClientsHold.
func TestMaxClientsDialsHeld(t *testing.T) {
	for _, tc := range []struct {
		name string
		tls  bool
	}{{"plain", false}, {"tls", true}} {
		t.Run(tc.name, func(t *testing.T) { testMaxClientsDialsHeld(t, tc.tls) })
	}
}

func testMaxClientsDialsHeld(t *testing.T, tls bool) {
	srv := testredis.Start(t, testredis.Options{TLS: tls})
	cfg := conf.Default()
	cfg.Redis.Addr = srv.Addr
	dialTLS(&cfg, srv.TLS)
	_, newClient, closeAll, err := openRedis(cfg, testLogger(t), prometheus.NewRegistry(), metrics.New(prometheus.NewRegistry()))
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll()
	admin := srv.Client()
	fillRedis(t, admin)
	rejected := func() int64 {
		info, err := admin.Info(context.Background(), "stats").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(line, "rejected_connections:"); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					t.Fatal(err)
				}
				return n
			}
		}
		t.Fatal("no rejected_connections in INFO stats")
		return 0
	}
	store := repo.New(newClient(0), repoSettings(cfg))
	before := rejected()
	const calls = 100
	for range calls {
		if err := store.Ready(context.Background()); err == nil {
			t.Fatal("Ready with Redis at its maxclients: nil error")
		}
	}
	if n := rejected() - before; n > 2 {
		t.Fatalf("%d calls within maxClientsHold had Redis refuse %d connections, want at most 2", calls, n)
	}
}
