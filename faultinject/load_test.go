//go:build unix

package faultinject

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/combo-service/combo-service/client"
	"github.com/combo-service/combo-service/kitex_gen/combo"
)

// comboKey is CONTRACT.md §2's combo key.
type comboKey struct {
	activity int64
	user     int64
	itemType string
}

func (k comboKey) String() string { return fmt.Sprintf("(%d,%d,%q)", k.activity, k.user, k.itemType) }

func keyOf(c *combo.Contribution) comboKey {
	return comboKey{activity: c.ActivityId, user: c.UserId, itemType: c.ItemType}
}

// itemTypes include bytes that must never corrupt or collide Redis keys.
var itemTypes = []string{"firework", "rose:{red}", "火箭 rocket"}

func contribution(k comboKey, qty int32) *combo.Contribution {
	return &combo.Contribution{
		Id: newID(), ActivityId: k.activity, UserId: k.user, StarId: 7, ItemId: int64(len(k.itemType)),
		ItemType: k.itemType, ItemName: "gift " + k.itemType, ItemIcon: "https://cdn.example/i.png",
		Nickname: fmt.Sprintf("用户%d", k.user), AvatarUrl: "https://cdn.example/u.png",
		Quantity: qty, CreatedAt: time.Now().UnixMilli(),
	}
}

// --- the ledger: what the service acknowledged ---------------------------

// A report is counted iff some attempt for its id was answered without an
// error: duplicate=false means this attempt counted it, duplicate=true
// that an earlier attempt did (whose answer was lost, or that ran
// concurrently). An id is retried until it is answered, so "counted" is
// exact for every id the ledger knows.
type entry struct {
	c        *combo.Contribution
	key      comboKey
	sent     time.Time // first attempt started
	ack      time.Time // first answer without error
	attempts int       // started
	counted  bool
	// From the first answer: window_id (the window's smallest id so far; 0
	// on a duplicate whose window had closed), duplicate, degraded.
	windowID int64
	dup      bool
	degraded bool
	fresh    int // answers with duplicate=false: more than one is a double count
}

type attempt struct {
	start, end time.Time
	replica    string
	err        error
	code       int32 // ComboError code, 0 when err is nil or not a ComboError
}

type ledger struct {
	t        *testing.T
	mu       sync.Mutex
	byID     map[int64]*entry
	attempts []attempt
	given    []int64 // ids abandoned after retryFor
}

func newLedger(t *testing.T) *ledger { return &ledger{t: t, byID: map[int64]*entry{}} }

func (l *ledger) begin(c *combo.Contribution, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.byID[c.Id]
	if e == nil {
		e = &entry{c: c, key: keyOf(c), sent: at}
		l.byID[c.Id] = e
	}
	e.attempts++
}

func (l *ledger) answer(c *combo.Contribution, r *replica, start, end time.Time, resp *combo.ReportContributionResponse, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	a := attempt{start: start, end: end, replica: r.name, err: err}
	if ce, ok := client.IsComboError(err); ok {
		a.code = ce.Code
	}
	l.attempts = append(l.attempts, a)
	if err != nil {
		return
	}
	e := l.byID[c.Id]
	if !resp.Duplicate {
		e.fresh++
		if e.fresh > 1 {
			l.t.Errorf("id %d counted twice: a second answer with duplicate=false (%s, %+v)", c.Id, r.name, resp)
		}
	}
	if e.counted {
		return
	}
	if resp.Duplicate && e.attempts == 1 {
		l.t.Errorf("id %d: duplicate=true on its only attempt (%s, %+v)", c.Id, r.name, resp)
	}
	e.counted, e.ack = true, end
	e.windowID, e.dup, e.degraded = resp.WindowId, resp.Duplicate, resp.Degraded
}

func (l *ledger) giveUp(id int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.given = append(l.given, id)
}

// acked counts the ids answered so far.
func (l *ledger) acked() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, e := range l.byID {
		if e.counted {
			n++
		}
	}
	return n
}

// snapshot copies the entries (for verification, after the load stopped).
func (l *ledger) snapshot() (map[int64]entry, []int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[int64]entry, len(l.byID))
	for id, e := range l.byID {
		out[id] = *e
	}
	return out, append([]int64(nil), l.given...)
}

// attemptsOf is how many attempts of id have begun.
func (l *ledger) attemptsOf(id int64) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e := l.byID[id]; e != nil {
		return e.attempts
	}
	return 0
}

func (l *ledger) attemptCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.attempts)
}

func (l *ledger) attemptsBetween(from, to time.Time) []attempt {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []attempt
	for _, a := range l.attempts {
		if !a.start.Before(from) && !a.end.After(to) {
			out = append(out, a)
		}
	}
	return out
}

// --- the load generator -----------------------------------------------------

type loadgen struct {
	t        *testing.T
	cl       *cluster
	led      *ledger
	retryFor time.Duration // per id, then it is abandoned (a test failure)

	abort  context.Context // cancelled when the test ends: stop retrying
	cancel context.CancelFunc

	mu      sync.Mutex
	stopRun context.CancelFunc
	workers sync.WaitGroup
}

func newLoadgen(t *testing.T, cl *cluster) *loadgen {
	abort, cancel := context.WithCancel(context.Background())
	g := &loadgen{t: t, cl: cl, led: newLedger(t), retryFor: 45 * time.Second, abort: abort, cancel: cancel}
	// Registered after the cluster's cleanup, so it runs first: no load
	// goroutine outlives the test or talks to a torn-down cluster.
	t.Cleanup(func() { g.stop(); cancel() })
	return g
}

// send reports c until an attempt is answered, each attempt to a replica
// that is up, avoiding the one that just failed. first, if not nil, is
// the first attempt's target.
func (g *loadgen) send(rng *rand.Rand, c *combo.Contribution, first *replica) (*combo.ReportContributionResponse, bool) {
	deadline := time.Now().Add(g.retryFor)
	r := first
	var last *replica
	for {
		if r == nil {
			r = g.cl.pick(rng, last)
		}
		start := time.Now()
		g.led.begin(c, start)
		resp, err := r.rpc.ReportContribution(context.Background(), &combo.ReportContributionRequest{Contribution: c})
		g.led.answer(c, r, start, time.Now(), resp, err)
		if err == nil {
			return resp, true
		}
		if ce, ok := client.IsComboError(err); ok && ce.Code == client.CodeInvalidArgument {
			g.t.Errorf("report %d refused as invalid: %v", c.Id, err)
			g.led.giveUp(c.Id)
			return nil, false
		}
		if time.Now().After(deadline) {
			g.t.Errorf("report %d not answered within %s; last error from %s: %v", c.Id, g.retryFor, r.name, err)
			g.led.giveUp(c.Id)
			return nil, false
		}
		pause := 10 * time.Millisecond
		if ce, ok := client.IsComboError(err); ok && ce.Code == client.CodeUnavailable {
			pause = 100 * time.Millisecond // Redis is down: as the client Reporter, back off
		}
		select {
		case <-g.abort.Done():
			g.led.giveUp(c.Id)
			return nil, false
		case <-time.After(pause):
		}
		last, r = r, nil
	}
}

// workload shapes the load: keys from activities x users x itemTypes, each
// pick of a key sending a burst of 1..burst reports (a combo), a pause
// between reports of one worker.
type workload struct {
	workers    int
	activities int
	users      int
	burst      int
	pause      time.Duration
}

// run starts the workers; stop ends them (each finishes its report in
// flight, retries included).
func (g *loadgen) run(w workload) {
	ctx, cancel := context.WithCancel(context.Background())
	g.mu.Lock()
	g.stopRun = cancel
	g.mu.Unlock()
	for i := range w.workers {
		g.workers.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(i)))
			for ctx.Err() == nil {
				k := comboKey{
					activity: int64(1 + rng.IntN(w.activities)),
					user:     int64(1 + rng.IntN(w.users)),
					itemType: itemTypes[rng.IntN(len(itemTypes))],
				}
				for range 1 + rng.IntN(w.burst) {
					if ctx.Err() != nil {
						return
					}
					if _, ok := g.send(rng, contribution(k, int32(1+rng.IntN(10))), nil); !ok {
						return
					}
					time.Sleep(w.pause)
				}
			}
		})
	}
}

func (g *loadgen) stop() {
	g.mu.Lock()
	if g.stopRun != nil {
		g.stopRun()
	}
	g.mu.Unlock()
	g.workers.Wait()
}

// waitAcked waits until n more reports than before have been answered.
func (g *loadgen) waitAcked(n int, timeout time.Duration) time.Time {
	g.t.Helper()
	target := g.led.acked() + n
	return waitUntil(g.t, timeout, fmt.Sprintf("%d acknowledged reports", target), func() bool { return g.led.acked() >= target })
}
