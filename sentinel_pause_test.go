package main

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/combo-service/combo-service/conf"
	"github.com/combo-service/combo-service/internal/testredis"
	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/push"
)

// Three Sentinels fail over a master paused (SIGSTOP: a VM stall) while
// reports come in and windows fall due, each report a window of its own.
// Flushes sent to the paused master wait on its sockets, and go-redis's
// Sentinel client closes those at +switch-master; the windows go out from
// the new master. The old master, resumed once every send it holds is
// past its deadline, runs what waited on its sockets before the Sentinels
// demote it: none of it may push a window again (a flush past its
// deadline answers Late). Every report acknowledged after the switch is
// pushed, once. (Resumed before a held flush's deadline, the old master
// pushes that window too, to the subscribers still on it: see README,
// Redis Sentinel.)
func TestPausedMasterResumedPastItsSendsDeadlinesPushesEachWindowOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("fails a master over")
	}
	// A flush's send waits up to 2 s (the worker's flush timeout),
	// past the switch, about 2 s after the pause: the switch, not the
	// read timeout, ends it. (With 500 ms, every send on the paused
	// master timed out before, and the connections dialled to send
	// again waited in their handshake: no flush was left to run.) It is
	// also every held send's deadline: at most this long after it went.
	const timeout = 2 * time.Second
	master := testredis.Start(t, testredis.Options{})
	replica := testredis.StartReplica(t, master)
	sentinels := testredis.StartSentinels(t, 3, sentinelMaster, master)
	s := startService(t, options{redis: master, mutate: func(c *conf.Config) {
		c.Redis.Addr = ""
		c.Redis.SentinelAddrs, c.Redis.SentinelMaster = []string{sentinels[0].Addr, sentinels[1].Addr, sentinels[2].Addr}, sentinelMaster
		c.Redis.Timeout = timeout
		// The windows opened before the pause come due during it.
		c.Window.Size = time.Second
		c.Worker.ClaimIdle = conf.DefaultClaimIdle(c.Window)
	}})
	// The replica's subscribers hear what the master publishes, and then
	// what the replica publishes once promoted (the Sentinel's CLIENT
	// KILL at the promotion makes go-redis subscribe again, before the
	// service hears of the switch). The old master's own, until its
	// demotion kills the connection, are what it published itself.
	pushes := subscribe(t, replica.Client())
	own := ownPushes(t, master)

	rep := startReporter(t, s)
	rep.waitAcked(t, 10, time.Now())
	master.Pause()
	paused := time.Now()
	before := rep.ackedBy(paused)
	for _, sn := range sentinels {
		waitSentinelNames(t, sn, replica.Addr, 10*time.Second)
	}
	switched := time.Now()
	t.Logf("the Sentinels name the replica %v after the pause", switched.Sub(paused).Round(10*time.Millisecond))
	// The new master pushes every window opened before the pause.
	pushes.until(10*time.Second, pushedAll(before), nil)
	// A flush went to the paused master and got no answer (the switch or
	// its read timeout ended it): else nothing could run there late.
	if n := flushErrors(t, s); n == 0 {
		t.Fatal("no flush failed on the paused master: the test did not test")
	}
	// Every send to the old master went before the new master pushed
	// (the service's client had switched by then), so each one's
	// deadline, on the node's clock, is at most timeout after now.
	// Timing is the point here: the old master resumes once that has
	// passed, with a margin.
	time.Sleep(timeout + 500*time.Millisecond)
	master.Resume()
	resumed := time.Now()
	// What waited on its sockets runs first, before the Sentinels demote
	// it (up to 10 s later: they look at a returning replica's INFO every
	// 10 s), and whatever it published then is heard before the answer to
	// a PING sent after it.
	if err := master.Client().Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	own.heard(t)
	// Taken now: once demoted, the old master hears the new one's pushes.
	again := own.after(resumed)
	rep.waitAcked(t, 5, switched)
	acked := rep.stop()

	// Every report acknowledged after the switch is pushed.
	var after []int64
	for id, at := range acked {
		if at.After(switched) {
			after = append(after, id)
		}
	}
	pushes.until(10*time.Second, pushedAll(after), nil)
	times := map[int64]int{}
	for _, r := range pushes.matching(nil) {
		times[r.msg.Record.ID]++
	}
	for _, r := range again {
		times[r.msg.Record.ID]++
	}
	lost := 0
	for id := range acked {
		switch n := times[id]; {
		case n > 1:
			t.Errorf("window of report %d pushed %d times", id, n)
		case n == 0:
			lost++
		}
	}
	t.Logf("%d reports acknowledged (%d after the switch), %d never pushed", len(acked), len(after), lost)
}

// flushErrors is the service's combo_redis_errors_total{op="flush"}.
func flushErrors(t *testing.T, s *service) float64 {
	t.Helper()
	for _, m := range gatherService(t, s)["combo_redis_errors_total"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "op" && l.GetValue() == "flush" {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatal(`the service exports no combo_redis_errors_total{op="flush"}`)
	return 0
}

// pushedAll is a condition on pushes: the windows of ids were pushed.
func pushedAll(ids []int64) func([]received) bool {
	return func(rs []received) bool {
		seen := map[int64]bool{}
		for _, r := range rs {
			seen[r.msg.Record.ID] = true
		}
		for _, id := range ids {
			if !seen[id] {
				return false
			}
		}
		return true
	}
}

// reporter sends reports, each to an activity of its own (so each opens
// its own window, of the report's id), one after another until stopped,
// and records when each was acknowledged.
type reporter struct {
	mu     sync.Mutex
	acked  map[int64]time.Time
	change chan struct{}
	quit   chan struct{}
	done   chan struct{}
}

func startReporter(t *testing.T, s *service) *reporter {
	r := &reporter{acked: map[int64]time.Time{}, change: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(r.done)
		for {
			select {
			case <-r.quit:
				return
			case <-time.After(20 * time.Millisecond):
			}
			// The test's goroutine takes no activity while this runs.
			c := gift(newActivity(), 1, "firework", 1)
			resp, err := s.rpc.ReportContribution(context.Background(), &combo.ReportContributionRequest{Contribution: c})
			if err != nil || resp.GetDuplicate() {
				continue // UNAVAILABLE while no master answers
			}
			r.mu.Lock()
			r.acked[c.Id] = time.Now()
			r.mu.Unlock()
			select {
			case r.change <- struct{}{}:
			default:
			}
		}
	}()
	t.Cleanup(func() { r.stop() })
	return r
}

// waitAcked waits until n reports were acknowledged after since.
func (r *reporter) waitAcked(t *testing.T, n int, since time.Time) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		r.mu.Lock()
		got := 0
		for _, at := range r.acked {
			if at.After(since) {
				got++
			}
		}
		r.mu.Unlock()
		if got >= n {
			return
		}
		select {
		case <-r.change:
		case <-deadline:
			t.Fatalf("%d reports acknowledged after %s within 10 s, want %d", got, since.Format(time.StampMilli), n)
		}
	}
}

// ackedBy are the reports acknowledged by at.
func (r *reporter) ackedBy(at time.Time) []int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ids []int64
	for id, when := range r.acked {
		if !when.After(at) {
			ids = append(ids, id)
		}
	}
	return ids
}

// stop stops the reports and returns when each was acknowledged.
func (r *reporter) stop() map[int64]time.Time {
	select {
	case <-r.quit:
	default:
		close(r.quit)
	}
	<-r.done
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.acked
}

// nodePushes are the pushes one Redis published, as a subscriber of its
// own heard them (not one that follows it, as go-redis's does: a
// Sentinel demoting it kills its subscribers, and the node then hears
// the new master's pushes).
type nodePushes struct {
	sub   *redis.PubSub
	mu    sync.Mutex
	all   []received
	pongs chan struct{}
}

func ownPushes(t *testing.T, node *testredis.Server) *nodePushes {
	t.Helper()
	sub := node.Client().PSubscribe(context.Background(), push.ChannelPattern)
	t.Cleanup(func() { sub.Close() })
	if _, err := sub.Receive(context.Background()); err != nil {
		t.Fatal(err)
	}
	p := &nodePushes{sub: sub, pongs: make(chan struct{}, 1)}
	go func() {
		for {
			m, err := sub.Receive(context.Background())
			if err != nil {
				return
			}
			if _, ok := m.(*redis.Pong); ok {
				p.pongs <- struct{}{}
			}
			if m, ok := m.(*redis.Message); ok {
				msg, err := push.Decode([]byte(m.Payload))
				if err != nil {
					t.Errorf("undecodable push on %s: %v", m.Channel, err)
					continue
				}
				p.mu.Lock()
				p.all = append(p.all, received{at: time.Now(), channel: m.Channel, msg: msg, raw: m.Payload})
				p.mu.Unlock()
			}
		}
	}()
	return p
}

// heard returns once every push the node published before it was called
// is heard: the node answers a PING on the subscription's connection
// after them.
func (p *nodePushes) heard(t *testing.T) {
	t.Helper()
	if err := p.sub.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.pongs:
	case <-time.After(5 * time.Second):
		t.Fatal("no answer to a PING on the subscription within 5 s")
	}
}

// after are the pushes heard after at.
func (p *nodePushes) after(at time.Time) []received {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []received
	for _, r := range p.all {
		if r.at.After(at) {
			out = append(out, r)
		}
	}
	return out
}

// waitSentinelNames waits until Sentinel sn names addr as the master.
func waitSentinelNames(t *testing.T, sn *testredis.Server, addr string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	c := sn.Client()
	for {
		got, err := c.Do(context.Background(), "SENTINEL", "get-master-addr-by-name", sentinelMaster).StringSlice()
		if err == nil && len(got) == 2 && got[0]+":"+got[1] == addr {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Sentinel %s names %v (%v) after %s, want %s", sn.Addr, got, err, within, addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
