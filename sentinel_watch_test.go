package main

import (
	"context"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/combo-service/combo-service/conf"
	"github.com/combo-service/combo-service/internal/testredis"
	"github.com/combo-service/combo-service/internal/testwait"
	"github.com/combo-service/combo-service/metrics"
)

// Of three Sentinels, the one go-redis's failover client listens to goes
// down; then the master, still up, is failed over. go-redis alone heard
// nothing until the old master was demoted, about 10 s later, and the
// reports that master acknowledged meanwhile were lost with it (477 of
// 745 in a review's run). The service hears the switch from the other
// Sentinels and leaves the old master at once: no report acknowledged a
// second after the switch is lost.
func TestFailoverIsHeardFromEverySentinel(t *testing.T) {
	if testing.Short() {
		t.Skip("fails a master over")
	}
	core, logs := observer.New(zap.WarnLevel)
	master := testredis.Start(t, testredis.Options{})
	replica := testredis.StartReplica(t, master)
	sentinels := testredis.StartSentinels(t, 3, sentinelMaster, master)
	// No Sentinel is paused to steer go-redis to one: a Sentinel paused
	// over 2 s (startService on a loaded machine) enters TILT for 30 s and
	// then refuses SENTINEL FAILOVER. Which ones go-redis listens to is
	// read below instead.
	s := startService(t, options{redis: master, log: zap.New(core), mutate: func(c *conf.Config) {
		c.Redis.Addr = ""
		c.Redis.SentinelAddrs = []string{sentinels[0].Addr, sentinels[1].Addr, sentinels[2].Addr}
		c.Redis.SentinelMaster = sentinelMaster
		c.Window.Size = time.Second
		c.Worker.ClaimIdle = conf.DefaultClaimIdle(c.Window)
	}})
	pushes := subscribe(t, replica.Client())
	rep := startReporter(t, s)
	rep.waitAcked(t, 10, time.Now())

	// go-redis subscribes to two channels on its Sentinel (sub=2); the
	// service's own watch to one on each. go-redis asks every Sentinel at
	// once and takes the first answer, so each of the service's two
	// failover clients may listen to any: every Sentinel one listens to
	// goes down, and of three at least one that none listens to is left
	// to announce the switch.
	ctx := context.Background()
	var survivors []*testredis.Server
	var gone []int
	for i, sn := range sentinels {
		list, err := sn.Client().Do(ctx, "CLIENT", "LIST", "TYPE", "pubsub").Text()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(list, " sub=2 ") {
			gone = append(gone, i)
		} else {
			survivors = append(survivors, sn)
		}
	}
	if len(gone) == 0 || len(survivors) == 0 {
		t.Fatalf("go-redis's failover subscriptions are on Sentinels %v of %d: want some, not all", gone, len(sentinels))
	}
	for _, i := range gone {
		sentinels[i].Kill()
	}
	if err := survivors[0].Client().Do(ctx, "SENTINEL", "FAILOVER", sentinelMaster).Err(); err != nil {
		t.Fatal(err)
	}
	waitSentinelNames(t, survivors[0], replica.Addr, 10*time.Second)
	switched := time.Now()
	rep.waitAcked(t, 50, switched.Add(time.Second))
	acked := rep.stop()

	// Every report acknowledged a second after the switch landed on the
	// new master, whose pushes this subscriber hears.
	var want []int64
	for id, at := range acked {
		if at.After(switched.Add(time.Second)) {
			want = append(want, id)
		}
	}
	for deadline := time.After(10 * time.Second); !pushedAll(want)(pushes.matching(nil)); {
		select {
		case <-pushes.cond:
			continue
		case <-deadline:
		}
		break
	}
	got := map[int64]bool{}
	for _, r := range pushes.matching(nil) {
		got[r.msg.Record.ID] = true
	}
	lost := 0
	for _, id := range want {
		if !got[id] {
			lost++
		}
	}
	if lost > 0 {
		t.Errorf("%d of %d reports acknowledged more than a second after the switch were never pushed: "+
			"the service kept writing to the old master", lost, len(want))
	}
	if n := logs.FilterMessageSnippet("closed the connections to the old master").Len(); n == 0 {
		t.Error("no warning that a Sentinel's announcement closed the connections to the old master")
	}
}

// Each connection the dialer makes is kept by the address dialed until
// it is closed, by its user or by closeAll, and keeps its socket in view
// (go-redis checks a pooled connection through it).
func TestConnsByAddrKeepsOpenConnectionsByAddress(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	conns := newConnsByAddr()
	dial := conns.dialer((&net.Dialer{}).DialContext)
	var cs []net.Conn
	for range 3 {
		c, err := dial(context.Background(), "tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := c.(syscall.Conn); !ok {
			t.Fatalf("a kept TCP connection %T hides its socket", c)
		}
		cs = append(cs, c)
	}
	if err := cs[0].Close(); err != nil {
		t.Fatal(err)
	}
	if n := conns.closeAll("127.0.0.1:1"); n != 0 {
		t.Errorf("closeAll of an address never dialed closed %d", n)
	}
	if n := conns.closeAll(ln.Addr().String()); n != 2 {
		t.Errorf("closeAll closed %d connections, want the 2 still open", n)
	}
	for i, c := range cs[1:] {
		if _, err := c.Write([]byte("PING\r\n")); err == nil {
			t.Errorf("connection %d still writable after closeAll", i+2)
		}
	}
	if n := conns.closeAll(ln.Addr().String()); n != 0 {
		t.Errorf("closeAll again closed %d, want none: closed connections are let go", n)
	}
}

// A dial that began before an announcement that the master left its
// address, and ended after it, was asked for the old master: its
// connection is closed, not kept past closeAll.
func TestConnsByAddrRefusesADialOverlappingAnAnnouncement(t *testing.T) {
	client, server := net.Pipe()
	defer server.Close()
	dialing, release := make(chan struct{}), make(chan struct{})
	conns := newConnsByAddr()
	dial := conns.dialer(func(context.Context, string, string) (net.Conn, error) {
		close(dialing)
		<-release
		return client, nil
	})
	type result struct {
		c   net.Conn
		err error
	}
	done := make(chan result, 1)
	go func() {
		c, err := dial(context.Background(), "tcp", "10.0.0.1:6379")
		done <- result{c, err}
	}()
	testwait.Receive(t, "the dial to begin", dialing)
	// On a goroutine of its own: a dialer that held its lock through the
	// dial would leave closeAll waiting for ever.
	closed := make(chan int, 1)
	go func() { closed <- conns.closeAll("10.0.0.1:6379") }()
	testwait.Receive(t, "closeAll during the dial", closed)
	close(release)
	r := testwait.Receive(t, "the dial to end", done)
	if r.err == nil || !strings.Contains(r.err.Error(), "left it while it was dialed") {
		t.Fatalf("a dial overlapping the announcement: %v, %v; want refused", r.c, r.err)
	}
	if _, err := client.Write([]byte("x")); err == nil {
		t.Error("the refused dial's connection is still open")
	}
	// A dial after the announcement is the pool's own: kept (the address
	// may be a master again, failed back).
	dial = conns.dialer(func(context.Context, string, string) (net.Conn, error) {
		c, _ := net.Pipe()
		return c, nil
	})
	c, err := dial(context.Background(), "tcp", "10.0.0.1:6379")
	if err != nil {
		t.Fatalf("a dial after the announcement: %v", err)
	}
	c.Close()
}

// A panic acting on an announcement is counted on combo_loop_panics_total
// and logged, and the watch acts on the next one.
func TestSentinelWatchCountsAPanicAndGoesOn(t *testing.T) {
	core, logs := observer.New(zap.ErrorLevel)
	m := metrics.New(prometheus.NewRegistry())
	panics := m.LoopPanics.WithLabelValues(metrics.LoopSentinelWatch)
	// No Sentinel to subscribe to, and no conns: acting panics.
	w := watchSentinels(conf.Redis{SentinelMaster: sentinelMaster}, nil, nil, nil, zap.New(core), m)
	defer w.stop()
	w.switched("127.0.0.1:26379", sentinelMaster+" 10.0.0.1 6379 10.0.0.2 6379")
	if n := testutil.ToFloat64(panics); n != 1 {
		t.Fatalf("combo_loop_panics_total{loop=sentinel_watch} = %v, want 1", n)
	}
	if logs.FilterMessageSnippet("recovered panic").Len() != 1 {
		t.Fatalf("logs %v, want the panic logged once", logs.All())
	}
	w.conns = newConnsByAddr()
	w.switched("127.0.0.1:26379", sentinelMaster+" 10.0.0.1 6379 10.0.0.2 6379") // nothing to close: no panic
	if n := testutil.ToFloat64(panics); n != 1 {
		t.Fatalf("combo_loop_panics_total{loop=sentinel_watch} = %v after an announcement acted on, want 1", n)
	}
}
