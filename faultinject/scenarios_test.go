//go:build unix

package faultinject

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/combo-service/combo-service/kitex_gen/combo"
)

// steady is the load of the short scenarios: 3 callers, 2 activities x 8
// users x 3 item types, combos of 1..4 reports.
var steady = workload{workers: 3, activities: 2, users: 8, burst: 4, pause: 5 * time.Millisecond}

const (
	metricReclaimed = "combo_reclaimed_entries_total"
	metricGone      = `combo_windows_flushed_total{status="gone"}`
	metricHeld      = "combo_held_windows"
)

// killHolding kills r with SIGKILL at a moment it has windows pending
// (read, not yet flushed), and returns those entry ids and the kill time.
func killHolding(t *testing.T, cl *cluster, g *loadgen, r *replica) ([]string, time.Time) {
	t.Helper()
	for range 10 {
		waitUntil(t, 10*time.Second, r.name+" holding windows", func() bool { return len(cl.pendingOf(r.name)) > 0 })
		r.kill()
		killedAt := time.Now()
		if pending := cl.pendingOf(r.name); len(pending) > 0 {
			t.Logf("killed %s (SIGKILL) holding %d windows", r.name, len(pending))
			return pending, killedAt
		}
		// It flushed them between the look and the kill: try again.
		r.start()
		g.waitAcked(20, 10*time.Second)
	}
	t.Fatalf("could not catch %s holding a window in 10 tries", r.name)
	return nil, time.Time{}
}

// 1. kill -9 one replica mid-window, then restart it with the same
// consumer name: it reads its own pending entries ("0") and publishes them.
func TestKillRestartSameName(t *testing.T) {
	// Nobody takes entries over within the test (claim_idle 30 s, not even
	// a's own claimer after its restart): a's windows can only be published
	// by a's restart reading its own pending entries first.
	cl := newCluster(t, clusterOpts{claimIdle: 30 * time.Second})
	rs := cl.start(2)
	a, b := rs[0], rs[1]
	o := newObserver(t, cl)
	g := newLoadgen(t, cl)
	g.run(steady)
	g.waitAcked(150, 15*time.Second)

	pending, _ := killHolding(t, cl, g, a)
	time.Sleep(300 * time.Millisecond) // a stays down a while; calls to it fail and are retried on b
	a.start()
	restarted := time.Now()
	published := waitUntil(t, 5*time.Second, "a's pending windows published after its restart", func() bool { return cl.retired(pending) })
	t.Logf("restarted a published its %d pending windows %s after it was ready", len(pending), published.Sub(restarted).Round(time.Millisecond))
	if n := b.metric(metricReclaimed) + a.metric(metricReclaimed); n != 0 {
		t.Errorf("%v entries reclaimed; a's windows should have come from a's own restart", n)
	}
	g.waitAcked(100, 10*time.Second)
	g.stop()
	// No replica holds a window another published (nothing is claimed), so
	// the quiet watch need not cover claim_idle.
	settle(t, g, o, 10*time.Second, cl.opts.window+cl.opts.grace+time.Second)
	record(t, 1, "kill -9 mid-window, restart with the same name (2 replicas)", verify(t, cl, g, o))
}

// 2. kill -9 one of two replicas for good: the other takes its windows
// over (XAUTOCLAIM) and publishes them within claim_idle + 2 s.
func TestKillForGoodOtherTakesOver(t *testing.T) {
	cl := newCluster(t, clusterOpts{})
	rs := cl.start(2)
	a, b := rs[0], rs[1]
	o := newObserver(t, cl)
	g := newLoadgen(t, cl)
	g.run(steady)
	g.waitAcked(150, 15*time.Second)

	pending, killedAt := killHolding(t, cl, g, a)
	limit := cl.opts.claimIdle + 2*time.Second
	published := waitUntil(t, limit+5*time.Second, "a's windows published by b", func() bool { return cl.retired(pending) })
	took := published.Sub(killedAt)
	t.Logf("b published a's %d windows %s after the kill", len(pending), took.Round(time.Millisecond))
	if took > limit {
		t.Errorf("a's windows were published %s after the kill; want within claim_idle + 2s = %s", took, limit)
	}
	// b counts what it claimed after handing it to its flusher, which may
	// publish it first: wait for the count, do not sample it.
	if !eventually(5*time.Second, func() bool { return b.metric(metricReclaimed) >= 1 }) {
		t.Errorf("b reclaimed %v entries, want >= 1", b.metric(metricReclaimed))
	}
	g.waitAcked(100, 10*time.Second)
	g.stop()
	settle(t, g, o, 10*time.Second, defaultQuiet(cl))
	record(t, 2, "kill -9 one of 2 replicas for good", verify(t, cl, g, o))
}

// 3. Under continuous load, kill -9 replicas at random moments, restarting
// each promptly under its name: 3 replicas, about 20 kills in a minute.
func TestRandomKillsUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("the one-minute random-kill scenario is skipped with -short")
	}
	const (
		duration = 60 * time.Second
		kills    = 20
	)
	cl := newCluster(t, clusterOpts{})
	rs := cl.start(3)
	o := newObserver(t, cl)
	g := newLoadgen(t, cl)
	g.run(workload{workers: 4, activities: 3, users: 10, burst: 4, pause: 10 * time.Millisecond})

	seed := uint64(time.Now().UnixNano())
	t.Logf("chaos seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 3))
	between := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(rng.Int64N(int64(hi-lo))) }
	start := time.Now()
	end := start.Add(duration)
	hardEnd := start.Add(duration + 30*time.Second) // a slow machine: more time for the kills, not fewer kills
	done := 0
	for done < kills && time.Now().Before(hardEnd) {
		// The moments are the scenario: a random gap (mean 2.3 s: 20 kills
		// and their restarts fit in the minute), a random victim.
		time.Sleep(between(1200*time.Millisecond, 3400*time.Millisecond))
		v := rs[rng.IntN(len(rs))]
		v.kill()
		done++
		time.Sleep(between(50*time.Millisecond, 400*time.Millisecond))
		v.start() // same consumer name, same ports; the other two stayed up
	}
	time.Sleep(time.Until(end)) // the load runs for the minute at least
	g.stop()
	t.Logf("%d kills in %s; %d reports acknowledged", done, time.Since(start).Round(time.Second), g.led.acked())
	if done < kills {
		t.Errorf("only %d kills in %s, want %d", done, time.Since(start), kills)
	}
	settle(t, g, o, 15*time.Second, defaultQuiet(cl))
	record(t, 3, fmt.Sprintf("random kill -9 under load (%d kills in %s, 3 replicas, restarted)", done, duration), verify(t, cl, g, o))
}

// 4. SIGSTOP a replica for longer than claim_idle, then SIGCONT it: the
// other takes its windows over, and the resumed one does not publish them
// again.
func TestPauseLongerThanClaimIdle(t *testing.T) {
	cl := newCluster(t, clusterOpts{})
	rs := cl.start(2)
	a, b := rs[0], rs[1]
	o := newObserver(t, cl)
	g := newLoadgen(t, cl)
	g.run(steady)
	g.waitAcked(150, 15*time.Second)

	var pending []string
	var stoppedAt time.Time
	var goneBefore float64
	for try := 0; ; try++ {
		waitUntil(t, 10*time.Second, "a holding windows", func() bool { return len(cl.pendingOf(a.name)) > 0 })
		goneBefore = a.metric(metricGone)
		a.pause()
		stoppedAt = time.Now()
		time.Sleep(150 * time.Millisecond) // a read blocked in Redis (BLOCK 100ms) may still deliver to a
		if pending = cl.pendingOf(a.name); len(pending) > 0 {
			break
		}
		a.resume()
		if try == 9 {
			t.Fatal("could not catch a holding a window in 10 tries")
		}
		g.waitAcked(20, 10*time.Second)
	}
	t.Logf("stopped a (SIGSTOP) holding %d windows; callers still send to it and time out", len(pending))
	time.Sleep(time.Until(stoppedAt.Add(cl.opts.claimIdle + 2*time.Second))) // the scenario: stopped longer than claim_idle
	waitUntil(t, 5*time.Second, "b taking over everything pending on the stopped a", func() bool {
		return len(cl.pendingOf(a.name)) == 0 && cl.retired(pending)
	})
	a.resume()
	t.Logf("resumed a (SIGCONT) after %s", time.Since(stoppedAt).Round(time.Millisecond))
	// The resumed a still holds those windows and flushes them: the flush
	// script finds them already published ("gone") and publishes nothing.
	if !eventually(5*time.Second, func() bool { return a.metric(metricGone) > goneBefore }) {
		t.Error("the resumed a never found a held window already published (flush status gone)")
	}
	// b counts what it claimed after handing it to its flusher, which may
	// publish it first: wait for the count, do not sample it.
	if !eventually(5*time.Second, func() bool { return b.metric(metricReclaimed) >= 1 }) {
		t.Errorf("b reclaimed %v entries, want >= 1", b.metric(metricReclaimed))
	}
	g.waitAcked(100, 10*time.Second)
	g.stop()
	settle(t, g, o, 10*time.Second, defaultQuiet(cl))
	record(t, 4, "SIGSTOP 1 of 2 replicas > claim_idle, then SIGCONT", verify(t, cl, g, o))
}

// 5. Kill redis-server under load and restart it (AOF, same port and
// directory): reports fail fast with UNAVAILABLE meanwhile, the replicas
// recover without a restart, and everything Redis acknowledged is published.
func TestRedisKilledAndRestarted(t *testing.T) {
	cl := newCluster(t, clusterOpts{viaGate: true})
	rs := cl.start(2)
	o := newObserver(t, cl)
	g := newLoadgen(t, cl)
	g.run(steady)
	g.waitAcked(150, 15*time.Second)
	procs := []*process{rs[0].current(), rs[1].current()}

	// Cut the replicas off, let what Redis already received run and reach
	// the subscriber, then crash Redis (see gateProxy for why in this order).
	cl.gate.cut()
	cutAt := time.Now()
	time.Sleep(300 * time.Millisecond)
	cl.redis.Kill()
	o.unsubscribe()
	time.Sleep(700 * time.Millisecond) // the outage; callers keep reporting and retrying
	cl.redis.Start()                   // same port and dir: the AOF brings the data back
	o.subscribe()
	cl.gate.restore()
	restoredAt := time.Now()
	t.Logf("Redis down (replicas cut off) for %s", restoredAt.Sub(cutAt).Round(time.Millisecond))

	recovered := g.waitAcked(20, 10*time.Second)
	if d := recovered.Sub(restoredAt); d > 5*time.Second {
		t.Errorf("reports flowed again %s after Redis came back; want within a few seconds", d)
	}
	outage := g.led.attemptsBetween(cutAt.Add(50*time.Millisecond), restoredAt)
	var unavailable int
	var slowest time.Duration
	for _, a := range outage {
		if a.err == nil {
			t.Errorf("a report was answered while Redis was down (%s)", a.replica)
			continue
		}
		if a.code != 2 {
			t.Errorf("during the outage %s answered %v; want ComboError code 2 (UNAVAILABLE)", a.replica, a.err)
			continue
		}
		unavailable++
		slowest = max(slowest, a.end.Sub(a.start))
	}
	t.Logf("during the outage: %d reports refused with UNAVAILABLE, the slowest in %s", unavailable, slowest.Round(time.Millisecond))
	if unavailable == 0 {
		t.Error("no report was refused during the outage")
	}
	if slowest > time.Second {
		t.Errorf("UNAVAILABLE took up to %s; want fail-fast (about redis.timeout)", slowest)
	}
	g.waitAcked(150, 10*time.Second)
	g.stop()
	for i, r := range rs {
		if r.current() != procs[i] || procs[i].exited() {
			t.Errorf("%s was restarted or exited; it must recover by itself", r.name)
		}
	}
	settle(t, g, o, 15*time.Second, defaultQuiet(cl))
	record(t, 5, "kill -9 redis-server under load, restart it (AOF); the replicas held off it² until the subscriber is back", verify(t, cl, g, o))
}

// 6. Duplicate reports: the same id sent to two replicas at once, once
// more at once after the first answer, and again after its window was
// published (within window.dedupe): counted once.
func TestDuplicateReports(t *testing.T) {
	cl := newCluster(t, clusterOpts{})
	rs := cl.start(2)
	o := newObserver(t, cl)
	g := newLoadgen(t, cl)
	const n = 60
	cs := make([]*combo.Contribution, n)
	var wg sync.WaitGroup
	for i := range cs {
		k := comboKey{activity: 1 + int64(i%2), user: 1 + int64(i%10), itemType: itemTypes[i%len(itemTypes)]}
		cs[i] = contribution(k, int32(1+i%7))
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i), 6))
			gate := make(chan struct{})
			var answers [2]*combo.ReportContributionResponse
			var both sync.WaitGroup
			for j, r := range rs {
				both.Go(func() {
					<-gate
					answers[j], _ = g.send(rand.New(rand.NewPCG(uint64(i), uint64(j))), cs[i], r)
				})
			}
			close(gate)
			both.Wait()
			if answers[0] == nil || answers[1] == nil {
				return // send reported why
			}
			// Both copies counted is always wrong. Both answered duplicate
			// is right when a send was retried: the attempt whose answer
			// was lost (the caller's timeout, or UNAVAILABLE after a
			// pipeline that still ran) may be the one that counted it.
			retried := g.led.attemptsOf(cs[i].Id) > 2
			if answers[0].Duplicate == answers[1].Duplicate && !(answers[0].Duplicate && retried) {
				t.Errorf("id %d sent twice at once: duplicate=%v and %v, want exactly one true", cs[i].Id, answers[0].Duplicate, answers[1].Duplicate)
			}
			if i%2 == 0 { // at once again, most likely while its window is open
				if resp, ok := g.send(rng, cs[i], nil); ok && !resp.Duplicate {
					t.Errorf("id %d sent a third time: duplicate=false", cs[i].Id)
				}
			}
		})
	}
	wg.Wait()
	settle(t, g, o, 10*time.Second, 0) // every window published
	pushed := o.count()
	rng := rand.New(rand.NewPCG(6, 6))
	for _, c := range cs {
		if resp, ok := g.send(rng, c, nil); ok && !resp.Duplicate {
			t.Errorf("id %d sent again after its window closed: duplicate=false (%+v)", c.Id, resp)
		}
	}
	settle(t, g, o, 10*time.Second, defaultQuiet(cl))
	if got := o.count(); got != pushed {
		t.Errorf("%d more pushes after re-sending already published ids", got-pushed)
	}
	record(t, 6, "same id twice at once (2 replicas), again after its window closed", verify(t, cl, g, o))
}

// 7. SIGTERM while windows are held: the replica stops taking RPCs,
// publishes every window it holds as it comes due, and exits 0.
func TestSigtermPublishesHeldWindows(t *testing.T) {
	// A 3 s window, so the windows are surely held when the signal lands;
	// one replica, so only it can publish them.
	cl := newCluster(t, clusterOpts{window: 3 * time.Second, grace: 50 * time.Millisecond, claimIdle: 5 * time.Second})
	a := cl.add("replica-a")
	a.start()
	o := newObserver(t, cl)
	g := newLoadgen(t, cl)
	rng := rand.New(rand.NewPCG(7, 7))
	firstSend := map[comboKey]time.Time{}
	var firstAck time.Time
	keys := 0
	for act := int64(1); act <= 2; act++ {
		for user := int64(1); user <= 5; user++ {
			for _, typ := range itemTypes {
				k := comboKey{activity: act, user: user, itemType: typ}
				keys++
				for range 1 + rng.IntN(3) {
					c := contribution(k, int32(1+rng.IntN(5)))
					if _, ok := firstSend[k]; !ok {
						firstSend[k] = time.Now()
					}
					g.send(rng, c, a)
					if firstAck.IsZero() {
						firstAck = time.Now()
					}
				}
			}
		}
	}
	waitUntil(t, 2*time.Second, fmt.Sprintf("a holding all %d windows", keys), func() bool { return a.metric(metricHeld) == float64(keys) })
	if n := o.count(); n != 0 {
		t.Fatalf("%d pushes before the windows were due", n)
	}
	termAt := time.Now()
	state, exitedAt := a.terminate(cl.opts.window + cl.opts.grace + 15*time.Second)
	t.Logf("SIGTERM %s after the first report; exit %d %s later", termAt.Sub(firstAck).Round(time.Millisecond),
		state.ExitCode(), exitedAt.Sub(termAt).Round(time.Millisecond))
	if state.ExitCode() != 0 {
		t.Errorf("exit code %d after SIGTERM (%v), want 0", state.ExitCode(), state)
	}
	if limit := cl.opts.window + cl.opts.grace + 3*time.Second; exitedAt.Sub(firstAck) > limit {
		t.Errorf("exited %s after the first report; want within W + grace and a little (%s)", exitedAt.Sub(firstAck), limit)
	}
	// a was the only replica: an empty stream now means a published every
	// window before it exited.
	if left := cl.leftovers(); len(left) > 0 {
		t.Errorf("after a's exit Redis still holds windows: %v", left)
	}
	settle(t, g, o, 5*time.Second, 500*time.Millisecond)
	for _, p := range o.snapshot() {
		k := comboKey{activity: p.msg.ActivityID, user: p.msg.Record.UserID, itemType: p.msg.Record.ItemType}
		if early := firstSend[k].Add(cl.opts.window).Sub(p.at); early > 0 {
			t.Errorf("window %d %s published %s before W had passed", p.msg.Record.ID, k, early)
		}
	}
	record(t, 7, "SIGTERM with windows held (W = 3s, 1 replica)", verify(t, cl, g, o))
}

// 8. Redis refuses writes for a second under load (min-replicas-to-write
// with no replica; MISCONF after a failed save and READONLY on a demoted
// master refuse the same way). Reports are answered degraded, each pushed
// on its own at once (the pre-aggregation behaviour); windows that come due
// meanwhile are not pushed, and not pushed twice, until Redis takes writes
// again, then once.
func TestRedisRefusesWrites(t *testing.T) {
	cl := newCluster(t, clusterOpts{allowDegraded: true})
	rs := cl.start(2)
	o := newObserver(t, cl)
	g := newLoadgen(t, cl)
	g.run(steady)
	g.waitAcked(150, 15*time.Second)

	ctx := context.Background()
	if err := cl.rdb.ConfigSet(ctx, "min-replicas-to-write", "1").Err(); err != nil {
		t.Fatal(err)
	}
	refusedAt := time.Now()
	time.Sleep(time.Second) // the refusal: callers keep reporting
	if err := cl.rdb.ConfigSet(ctx, "min-replicas-to-write", "0").Err(); err != nil {
		t.Fatal(err)
	}
	t.Logf("Redis refused writes for %s", time.Since(refusedAt).Round(time.Millisecond))
	var refused float64
	for _, r := range rs {
		refused += r.metric(`combo_redis_errors_total{op="flush"}`) + r.metric(`combo_redis_errors_total{op="flush_script"}`)
	}
	if refused == 0 {
		t.Error("no flush was refused: the scenario did not refuse writes while windows came due")
	}
	g.waitAcked(150, 10*time.Second)
	g.stop()
	settle(t, g, o, 10*time.Second, defaultQuiet(cl))
	out := verify(t, cl, g, o)
	t.Logf("%d reports answered degraded, %v flushes refused", out.degraded, refused)
	if out.degraded == 0 {
		t.Error("no report was answered degraded while Redis refused writes")
	}
	record(t, 8, "Redis refuses writes for 1 s under load (min-replicas-to-write)", out)
}
