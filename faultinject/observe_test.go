//go:build unix

package faultinject

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/combo-service/combo-service/push"
)

// received is one push as a gateway sees it.
type received struct {
	at      time.Time
	channel string
	msg     push.Message
}

// observer is the test's subscriber to every activity's channel.
type observer struct {
	t      *testing.T
	rdb    *redis.Client
	mu     sync.Mutex
	pushes []received
	sub    *redis.PubSub
	done   chan struct{}
}

func newObserver(t *testing.T, cl *cluster) *observer {
	t.Helper()
	o := &observer{t: t, rdb: cl.redis.Client()}
	o.subscribe()
	t.Cleanup(o.unsubscribe)
	return o
}

// subscribe starts a subscription and returns once Redis confirmed it.
func (o *observer) subscribe() {
	o.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	sub := o.rdb.PSubscribe(ctx, push.ChannelPattern)
	if _, err := sub.Receive(ctx); err != nil {
		o.t.Fatalf("psubscribe %s: %v", push.ChannelPattern, err)
	}
	done := make(chan struct{})
	ch := sub.Channel(redis.WithChannelSize(1 << 16))
	go func() {
		defer close(done)
		for m := range ch {
			at := time.Now()
			msg, err := push.Decode([]byte(m.Payload))
			if err != nil {
				o.t.Errorf("undecodable push on %s: %v: %s", m.Channel, err, m.Payload)
				continue
			}
			if m.Channel != push.Channel(msg.ActivityID) || msg.Type != push.Type {
				o.t.Errorf("push on %s has activity_id %d, type %q", m.Channel, msg.ActivityID, msg.Type)
			}
			o.mu.Lock()
			o.pushes = append(o.pushes, received{at: at, channel: m.Channel, msg: msg})
			o.mu.Unlock()
		}
	}()
	o.mu.Lock()
	o.sub, o.done = sub, done
	o.mu.Unlock()
}

// unsubscribe ends the subscription (safe to call twice).
func (o *observer) unsubscribe() {
	o.mu.Lock()
	sub, done := o.sub, o.done
	o.sub = nil
	o.mu.Unlock()
	if sub == nil {
		return
	}
	_ = sub.Close()
	<-done
}

func (o *observer) snapshot() []received {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]received(nil), o.pushes...)
}

func (o *observer) count() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.pushes)
}

// --- verification -----------------------------------------------------------

// outcome is one scenario's summary row.
type outcome struct {
	reports    int           // distinct acknowledged (counted) report ids
	windows    int           // distinct windows (record ids) pushed
	lost       int           // windows missing (see verify)
	duplicated int           // pushes of a window already pushed
	degraded   int           // reports answered degraded: pushed on their own
	early      int           // pushes of aggregated windows less than W after their first report was sent
	maxDelay   time.Duration // see delayHeader
}

// sums returns, per combo key, the quantity reported (over distinct
// counted ids) and pushed (over every push).
func sums(entries map[int64]entry, pushes []received) (reported, pushed map[comboKey]int64) {
	reported, pushed = map[comboKey]int64{}, map[comboKey]int64{}
	for _, e := range entries {
		if e.counted {
			reported[e.key] += int64(e.c.Quantity)
		}
	}
	for _, p := range pushes {
		r := p.msg.Record
		pushed[comboKey{activity: p.msg.ActivityID, user: r.UserID, itemType: r.ItemType}] += int64(r.Quantity)
	}
	return reported, pushed
}

// settle waits until every acknowledged quantity has been pushed (per key,
// pushed >= reported), then watches for quiet more: a late second publish
// of any window shows up there. It returns when everything was pushed.
func settle(t *testing.T, g *loadgen, o *observer, timeout, quiet time.Duration) time.Time {
	t.Helper()
	entries, _ := g.led.snapshot()
	complete := func() (bool, string) {
		reported, pushed := sums(entries, o.snapshot())
		var short []string
		for k, q := range reported {
			if pushed[k] < q {
				short = append(short, fmt.Sprintf("%s pushed %d of %d", k, pushed[k], q))
			}
		}
		sort.Strings(short)
		if len(short) > 5 {
			short = append(short[:5], fmt.Sprintf("... %d keys in all", len(short)))
		}
		return len(short) == 0, strings.Join(short, "; ")
	}
	deadline := time.Now().Add(timeout)
	for {
		ok, why := complete()
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("not every acknowledged quantity was pushed within %s: %s", timeout, why)
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	done := time.Now()
	time.Sleep(quiet) // waiting for the absence of a late duplicate
	return done
}

// defaultQuiet covers a replica that still holds a window another one
// already published: it would flush it within claim_idle + W + grace.
func defaultQuiet(cl *cluster) time.Duration {
	return cl.opts.claimIdle + cl.opts.window + cl.opts.grace + 750*time.Millisecond
}

// verify checks the pushes against the ledger and Redis's final state, and
// returns the summary figures:
//
//   - per combo key, the sum pushed equals the sum of the distinct counted
//     reports: every acknowledged quantity is in exactly one push;
//   - no window (record id) is pushed twice;
//   - windows, as far as the answers tell: every answer names the window it
//     went into by the window's smallest id so far (window_id), so counted
//     ids fall into groups known to share a window (union-find over id ~
//     window_id). A group may still be part of a larger window: a smaller
//     id that joined later names only itself, and a duplicate answered after
//     its window closed names none. So: each push's record id must be a
//     counted id of its key, and its quantity at least its group's; a group
//     with no push of its own must have a push of its key with a smaller
//     record id that it can have joined; otherwise it is lost;
//   - Redis holds no stream entry, pending entry or window hash.
func verify(t *testing.T, cl *cluster, g *loadgen, o *observer) outcome {
	t.Helper()
	entries, given := g.led.snapshot()
	pushes := o.snapshot()
	var out outcome
	if len(given) > 0 {
		t.Errorf("%d reports were never answered (e.g. id %d)", len(given), given[0])
	}

	// Groups of ids known to share a window.
	parent := map[int64]int64{}
	var find func(int64) int64
	find = func(x int64) int64 {
		p, ok := parent[x]
		if !ok || p == x {
			return x
		}
		r := find(p)
		parent[x] = r
		return r
	}
	for id, e := range entries {
		if !e.counted {
			continue
		}
		out.reports++
		switch {
		case e.degraded:
			// Published on its own at once: a window of its own.
			out.degraded++
			if !cl.opts.allowDegraded {
				t.Errorf("id %d was answered degraded: the aggregation step failed", id)
			}
		case e.windowID != 0 && e.windowID != id:
			w, ok := entries[e.windowID]
			if !ok || !w.counted || w.key != e.key {
				t.Errorf("id %d %s: answer names window %d, no counted report of this key", id, e.key, e.windowID)
				continue
			}
			if ra, rb := find(id), find(e.windowID); ra != rb {
				parent[ra] = rb
			}
		}
	}
	type group struct {
		key       comboKey
		minID     int64
		qty       int64
		firstAk   time.Time
		firstSent time.Time // the earliest first attempt of its reports
		degraded  bool      // published on its own at once, by design
		ids       int
		pushed    bool
	}
	groups := map[int64]*group{}
	for id, e := range entries {
		if !e.counted {
			continue
		}
		root := find(id)
		gr := groups[root]
		if gr == nil {
			gr = &group{key: e.key, minID: id, firstAk: e.ack, firstSent: e.sent}
			groups[root] = gr
		}
		gr.degraded = gr.degraded || e.degraded
		if e.sent.Before(gr.firstSent) {
			gr.firstSent = e.sent
		}
		gr.qty += int64(e.c.Quantity)
		gr.ids++
		gr.minID = min(gr.minID, id)
		if e.ack.Before(gr.firstAk) {
			gr.firstAk = e.ack
		}
	}

	// Pushes against groups.
	seen := map[int64]int{}
	smallest := map[comboKey]int64{} // per key, the smallest record id pushed
	for _, p := range pushes {
		rec := p.msg.Record
		key := comboKey{activity: p.msg.ActivityID, user: rec.UserID, itemType: rec.ItemType}
		seen[rec.ID]++
		if seen[rec.ID] > 1 {
			out.duplicated++
			t.Errorf("window %d %s published %d times (quantity %d)", rec.ID, key, seen[rec.ID], rec.Quantity)
			continue
		}
		out.windows++
		if rec.ComboCount != rec.Quantity {
			t.Errorf("window %d: combo_count %d != quantity %d", rec.ID, rec.ComboCount, rec.Quantity)
		}
		e, ok := entries[rec.ID]
		if !ok || !e.counted {
			t.Errorf("push %+v: its record id is no acknowledged report", rec)
			continue
		}
		if e.key != key {
			t.Errorf("push %+v on key %s: its id was reported for %s", rec, key, e.key)
			continue
		}
		if s, ok := smallest[key]; !ok || rec.ID < s {
			smallest[key] = rec.ID
		}
		gr := groups[find(rec.ID)]
		gr.pushed = true
		if int64(rec.Quantity) < gr.qty {
			t.Errorf("push of window %d %s: quantity %d, but its answers put %d reports with quantity %d in it",
				rec.ID, key, rec.Quantity, gr.ids, gr.qty)
		}
		if d := p.at.Sub(gr.firstAk.Add(cl.opts.window + cl.opts.grace)); d > out.maxDelay {
			out.maxDelay = d
		}
		// Never early (CONTRACT.md §3): the report that opened the window
		// arrived after its first attempt started, and the window is due
		// W + grace after that arrival, so no push of an aggregated
		// window may come less than W after its reports' first send. A
		// kill, a claim or a Redis restart must not shortcut that.
		if !gr.degraded {
			if early := gr.firstSent.Add(cl.opts.window).Sub(p.at); early > 0 {
				out.early++
				t.Errorf("window %d %s published %s before W had passed since its first report was sent",
					rec.ID, key, early)
			}
		}
	}
	var missing []string
	for _, gr := range groups {
		if s, ok := smallest[gr.key]; gr.pushed || (ok && s < gr.minID) {
			continue
		}
		out.lost++
		missing = append(missing, fmt.Sprintf("%d %s qty %d (%d reports, first ack %s)",
			gr.minID, gr.key, gr.qty, gr.ids, gr.firstAk.Format("15:04:05.000")))
	}

	// Sums per key: exact conservation.
	reported, pushed := sums(entries, pushes)
	var diff []string
	short := 0
	for k := range reported {
		if pushed[k] != reported[k] {
			diff = append(diff, fmt.Sprintf("%s reported %d pushed %d", k, reported[k], pushed[k]))
			if pushed[k] < reported[k] {
				short++
			}
		}
	}
	for k := range pushed {
		if _, ok := reported[k]; !ok {
			diff = append(diff, fmt.Sprintf("%s reported 0 pushed %d", k, pushed[k]))
		}
	}
	// A key short of quantity lost at least one window, even when every
	// group found a push it could have joined.
	out.lost = max(out.lost, short)
	sort.Strings(missing)
	sort.Strings(diff)
	if len(missing) > 0 {
		t.Errorf("%d windows never pushed, e.g. %s", len(missing), strings.Join(missing[:min(5, len(missing))], "; "))
	}
	if len(diff) > 0 {
		t.Errorf("conservation broken on %d keys, e.g. %s", len(diff), strings.Join(diff[:min(5, len(diff))], "; "))
	}
	if left := cl.leftovers(); len(left) > 0 {
		t.Errorf("Redis not drained: %s", strings.Join(left, "; "))
	}
	t.Logf("verified: %d reports (%d attempts) on %d keys in %d windows; %d pushes",
		out.reports, g.led.attemptCount(), len(reported), out.windows, len(pushes))
	return out
}
