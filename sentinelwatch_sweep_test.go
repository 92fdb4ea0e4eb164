package main

import (
	"context"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/combo-service/combo-service/conf"
	"github.com/combo-service/combo-service/internal/testredis"
	"github.com/combo-service/combo-service/metrics"
)

// Tests pinning what a mutation sweep of the Sentinel watch found loose:
// each fails with the mutant its comment names.

// pipeConns dials n connections to addr through a connsByAddr, each one
// end of a pipe.
func pipeConns(t *testing.T, addr string, n int) *connsByAddr {
	t.Helper()
	conns := newConnsByAddr()
	dial := conns.dialer(func(context.Context, string, string) (net.Conn, error) {
		c, s := net.Pipe()
		t.Cleanup(func() { s.Close() })
		return c, nil
	})
	for range n {
		if _, err := dial(context.Background(), "tcp", addr); err != nil {
			t.Fatal(err)
		}
	}
	return conns
}

// Another master's failover (one Sentinel may watch several) leaves this
// service's connections alone (mutant: the master's name not checked).
func TestSwitchOfAnotherMasterClosesNothing(t *testing.T) {
	conns := pipeConns(t, "10.0.0.1:6379", 2)
	w := watchSentinels(conf.Redis{SentinelMaster: "combo"}, nil, nil, conns, zap.NewNop(), metrics.New(prometheus.NewRegistry()))
	defer w.stop()
	w.switched("s1:26379", "other 10.0.0.1 6379 10.0.0.2 6379")
	if n := conns.closeAll("10.0.0.1:6379"); n != 2 {
		t.Fatalf("another master's switch closed %d of this service's 2 connections", 2-n)
	}
}

// Closing a single connection to the old master is warned of too
// (mutant: only more than one).
func TestSwitchClosingOneConnectionWarns(t *testing.T) {
	conns := pipeConns(t, "10.0.0.1:6379", 1)
	core, logs := observer.New(zap.WarnLevel)
	w := watchSentinels(conf.Redis{SentinelMaster: "combo"}, nil, nil, conns, zap.New(core), metrics.New(prometheus.NewRegistry()))
	defer w.stop()
	w.switched("s1:26379", "combo 10.0.0.1 6379 10.0.0.2 6379")
	if logs.FilterMessageSnippet("closed the connections to the old master").Len() != 1 {
		t.Fatalf("logged %v, want one warning", logs.All())
	}
}

// The watch logs in to each Sentinel as redis.sentinel_username (not the
// data nodes' user, which the Sentinel need not know), through the dial it
// is given (mutants: the data nodes' login; a dialer of its own).
func TestWatchSubscribesAsTheSentinelUserThroughItsDial(t *testing.T) {
	master := testredis.Start(t, testredis.Options{})
	sentinel := testredis.StartSentinel(t, sentinelMaster, master)
	sc := sentinel.Client()
	defer sc.Close()
	ctx := context.Background()
	if err := sc.Do(ctx, "ACL", "SETUSER", "watcher", "on", ">spw", "+@all", "&*").Err(); err != nil {
		t.Fatal(err)
	}
	var dials atomic.Int32
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}
	r := conf.Default().Redis
	r.SentinelAddrs, r.SentinelMaster = []string{sentinel.Addr}, sentinelMaster
	r.SentinelUsername, r.SentinelPassword = "watcher", "spw"
	r.Username, r.Password = "data-user", "dpw" // unknown to the Sentinel
	w := watchSentinels(r, nil, dial, newConnsByAddr(), zap.NewNop(), metrics.New(prometheus.NewRegistry()))
	defer w.stop()
	waitUntil(t, 10*time.Second, "a subscription as the Sentinel user", func() bool {
		list, err := sc.Do(ctx, "CLIENT", "LIST", "TYPE", "pubsub").Text()
		return err == nil && strings.Contains(list, "user=watcher")
	})
	if dials.Load() == 0 {
		t.Error("the watch did not dial through the dial it was given")
	}
}
