package client

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cloudwego/kitex/client/callopt"
	"go.uber.org/zap"

	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/validate"
)

var (
	// ErrQueueFull is returned by Report when the Reporter already holds
	// QueueSize contributions. The contribution was not taken: the caller
	// still owns it (log it, persist it, or report it again later).
	ErrQueueFull = errors.New("combo client: reporter queue is full")
	// ErrClosed is returned by Report once Close has been called: the
	// contribution was not taken. The error OnDrop gets for contributions
	// a Close gave up on (its ctx ended first) wraps it too, with ctx's
	// error.
	ErrClosed = errors.New("combo client: reporter is closed")
	// ErrRetriesExhausted is wrapped, with the last attempt's error, by
	// the error OnDrop gets for a batch whose every attempt failed (1 +
	// MaxRetries of them; one with MaxRetries negative).
	ErrRetriesExhausted = errors.New("combo client: retries exhausted")
	// ErrBadResponse is the (retryable) error of an attempt whose reply was
	// not one result per contribution; it reaches OnDrop if retries run out.
	ErrBadResponse = errors.New("combo client: malformed ReportContributions response")
	// ErrSenderPanicked is the (retryable) error of an attempt whose
	// BatchSender panicked; the panic's value follows it in the message.
	ErrSenderPanicked = errors.New("combo client: BatchSender panicked")
)

// BatchSender sends one batch. comboservice.Client satisfies it. The
// Reporter bounds each call both by its ctx deadline and by a
// callopt.WithRPCTimeout(RPCTimeout) call option; a sender that is not a
// Kitex client may ignore the call options.
type BatchSender interface {
	ReportContributions(ctx context.Context, req *combo.ReportContributionsRequest, callOptions ...callopt.Option) (*combo.ReportContributionsResponse, error)
}

// ReporterStats is a consistent snapshot of a Reporter's counters. Every
// Report call counts once, in Accepted, QueueFull, Invalid or Closed; at any
// snapshot Accepted == Sent + Dropped + Queued + InFlight.
type ReporterStats struct {
	Queued   int    // waiting to be put in a batch
	InFlight int    // in batches being sent or waiting for a retry
	Accepted uint64 // taken by Report
	Sent     uint64 // acknowledged by combo-service
	// Of Sent, those the service answered duplicate (its id was counted
	// before: an earlier attempt got through, or the caller reported it
	// twice) and degraded (the service could not aggregate it and
	// published it on its own: the live feed shows it as a separate item).
	Duplicate, Degraded uint64
	Retried             uint64 // re-sent after a failed attempt, counted per contribution
	Dropped             uint64 // given up on: handed to OnDrop, logged
	QueueFull           uint64 // refused by Report with ErrQueueFull
	Invalid             uint64 // refused by Report with a validation error
	Closed              uint64 // refused by Report with ErrClosed
	// OnDropPanics counts OnDrop calls that panicked; each was recovered
	// and logged with the ids it was handed.
	OnDropPanics uint64
}

// Reporter reports contributions to combo-service fire-and-forget: Report
// only validates and enqueues; batches are sent in the background when
// BatchSize sendable contributions (see below) are queued or the oldest of
// them has waited Linger, whichever comes first, at most Concurrency
// batches at a time, each retried up to MaxRetries times. Nothing is lost
// silently: a contribution is either refused by Report with an error,
// acknowledged by the service (Sent), or given up on (Dropped): handed to
// OnDrop with the reason and logged to Logger, whichever of them are set;
// with neither set, drops are logged to stderr.
//
// Reports of one combo key (activity_id, user_id, item_type) reach the
// service in Report order, so that its live windows match the DB poll path
// (MergeLatest) when the caller reports a key's rows in created_at order: a
// batch never takes a contribution whose key has one in a batch in flight
// (being sent or waiting for a retry); it stays queued, in order, until that
// batch is sent or dropped (after a drop, see the package doc for what the
// order cannot cover). Different keys are sent concurrently. The cost:
// while a batch is retried, the later reports of its keys wait with it (up
// to MaxRetries backoffs), holding their places in QueueSize, and few
// distinct keys mean fewer batches in flight.
//
// Delivery is at least once while a batch's retries last (about 11-32 s
// with the default options), then the batch is dropped: a batch whose
// acknowledgement was lost is sent again, which combo-service deduplicates
// by contribution id within its window.dedupe (60 s by default, longer
// than the default retries take); but while Redis refuses writes (OOM,
// MISCONF, NOREPLICAS) the service cannot remember the id of a report it
// publishes on its own (degraded), and a batch sent again then pushes it
// again. Contributions
// held in memory are lost if the process dies without Close; the caller's
// DB row is the durable copy.
//
// A Reporter is safe for concurrent use.
type Reporter struct {
	sender  BatchSender
	opts    ReporterOptions
	metrics *metrics
	randN   func(time.Duration) time.Duration // rand.N; tests pin it
	epoch   time.Time                         // a batch's enqueue times are offsets from it

	ctx    context.Context // canceled when Close gives up (abort)
	cancel context.CancelFunc
	wake   chan struct{} // cap 1: the dispatcher has something to look at
	slots  chan struct{} // cap Concurrency: one token per batch in flight
	done   chan struct{} // closed when the dispatcher and all sends are over
	gaveUp chan struct{} // closed by abort: a Close waiting for done stops waiting
	sends  sync.WaitGroup
	turns  atomic.Uint64 // dispatcher loop turns: a test checks it never spins
	// drops counts OnDrop calls a send has begun (Add under mu, where the
	// batch, or one refused item of it, is resolved as dropped): Close
	// waits for them even when it gives up on the sends, so that it never
	// returns while a dropped contribution is still on its way to the
	// caller.
	drops sync.WaitGroup

	mu       sync.Mutex
	pending  []pendingItem // FIFO, oldest first
	inflight map[*batch]struct{}
	held     int // len(pending) + contributions in inflight batches
	// keys holds, per combo key (by keyOf), its contributions in batches
	// in flight (retries included) and in pending; a key is absent when it
	// has neither. A key with some in flight is busy, and its pending
	// contributions are blocked: they may not join a batch until that
	// key's batch resolves, so a key's reports reach the service in Report
	// order. blocked counts them, so that len(pending) - blocked, the
	// sendable ones, to which BatchSize and Linger apply, is known without
	// a scan: a key becoming busy or free moves its queued count into or
	// out of blocked. (Rescanning pending at each cut and resolve instead
	// cost 1.8 us per report against 1.2 with a full queue of 1,024 keys,
	// BenchmarkReporter; 0.45 before keys were kept in order.)
	keys    map[uint64]keyCount
	blocked int
	seed    maphash.Seed
	// closed is set (under mu) by Close. Report reads it before taking mu
	// too, so that it refuses with ErrClosed before validating.
	closed   atomic.Bool
	aborted  bool
	closeErr error         // what every Close returns once one has given up with contributions held
	stats    ReporterStats // Queued and InFlight are derived on read
}

type pendingItem struct {
	c   *combo.Contribution
	key uint64    // keyOf(c)
	at  time.Time // enqueue time, for Linger
}

type keyCount struct{ inFlight, queued int32 }

// comboKey is what combo-service merges reports by (CONTRACT §2): its
// windows match the DB poll path's only if a key's reports arrive in
// created_at order.
type comboKey struct {
	activityID, userID int64
	itemType           string
}

// keyOf is c's combo key hashed: two keys that collide share their order,
// which holds a report back more than needed, never less.
func (r *Reporter) keyOf(c *combo.Contribution) uint64 {
	return maphash.Comparable(r.seed, comboKey{activityID: c.ActivityId, userID: c.UserId, itemType: c.ItemType})
}

// batch is owned by one send goroutine; resolved (under Reporter.mu) marks
// that its fate has been counted, by the send or by an abort, exactly once.
// items shrinks (under Reporter.mu, never in place) when the service refuses
// one of them; the rest stay in flight.
type batch struct {
	items []*combo.Contribution
	// ats are the items' enqueue times, as offsets from the Reporter's
	// epoch (8 bytes, not a time.Time's 24), in order, so the first is the
	// oldest held (read under mu: dropItem shrinks both).
	ats      []time.Duration
	resolved bool
}

// NewReporter starts a Reporter sending through sender. Call Close to flush
// and stop it.
func NewReporter(sender BatchSender, opts ReporterOptions) (*Reporter, error) {
	return newReporter(sender, opts, rand.N[time.Duration])
}

// newReporter is NewReporter with the random source of the retry jitter:
// randN(n) returns a uniform duration in [0, n).
func newReporter(sender BatchSender, opts ReporterOptions, randN func(time.Duration) time.Duration) (*Reporter, error) {
	if sender == nil {
		return nil, errors.New("combo client: NewReporter needs a BatchSender")
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if opts.OnDrop == nil && opts.Logger == nil {
		opts.Logger = newDefaultDropLogger() // nothing else would see a drop
	}
	r := &Reporter{
		sender:   sender,
		opts:     opts,
		randN:    randN,
		wake:     make(chan struct{}, 1),
		slots:    make(chan struct{}, opts.Concurrency),
		done:     make(chan struct{}),
		gaveUp:   make(chan struct{}),
		inflight: make(map[*batch]struct{}),
		keys:     make(map[uint64]keyCount),
		seed:     maphash.MakeSeed(),
		epoch:    time.Now(),
	}
	m, err := newMetrics(opts.Registerer, func() float64 {
		r.mu.Lock()
		defer r.mu.Unlock()
		return float64(r.held)
	}, r.oldestHeldSeconds)
	if err != nil {
		return nil, err
	}
	r.metrics = m
	r.ctx, r.cancel = context.WithCancel(context.Background())
	go r.dispatch()
	return r, nil
}

// Report validates c and enqueues a copy of it; it never waits for the
// network. It returns ErrClosed once Close has been called (whether or not
// c is valid), else the validation error (naming the field, e.g.
// "contribution.created_at") or ErrQueueFull; on an error nothing was
// enqueued and the caller still owns the report. A nil error means the
// Reporter owns it: it will end up Sent or Dropped.
//
// ctx is not used to abandon the report: it is meant to be called right
// after the DB write, when the caller's request may already be canceled.
func (r *Reporter) Report(ctx context.Context, c *combo.Contribution) error {
	// Closed comes first: once Close has been called, every report gets
	// ErrClosed, valid or not, as ErrClosed's doc says.
	if r.closed.Load() {
		r.mu.Lock()
		r.stats.Closed++
		r.metrics.closed.Inc()
		r.mu.Unlock()
		return ErrClosed
	}
	if err := validate.Contribution(c, "contribution"); err != nil {
		r.mu.Lock()
		r.stats.Invalid++
		r.metrics.invalid.Inc() // under mu, like every counter: see resolve
		r.mu.Unlock()
		return err
	}
	cp := *c // the caller may reuse c; every field is a value

	r.mu.Lock()
	if r.closed.Load() { // Close was called while c was validated
		r.stats.Closed++
		r.metrics.closed.Inc()
		r.mu.Unlock()
		return ErrClosed
	}
	if r.held >= r.opts.QueueSize {
		r.stats.QueueFull++
		r.metrics.queueFull.Inc()
		r.mu.Unlock()
		return ErrQueueFull
	}
	item := pendingItem{c: &cp, key: r.keyOf(&cp), at: time.Now()}
	r.pending = append(r.pending, item)
	r.held++
	r.stats.Accepted++
	wake := false
	kc := r.keys[item.key]
	kc.queued++
	r.keys[item.key] = kc
	if kc.inFlight > 0 {
		r.blocked++
	} else {
		// The dispatcher must arm its Linger timer for a first sendable item
		// and cut a batch when BatchSize is reached. Report raises the
		// sendable count by one; otherwise only a cut (after which the
		// dispatcher looks again) or a resolve (which signals) changes it,
		// so signalling when it reaches 1 or BatchSize here misses nothing.
		n := len(r.pending) - r.blocked
		wake = n == 1 || n == r.opts.BatchSize
	}
	r.mu.Unlock()

	if wake {
		r.signal()
	}
	return nil
}

// Stats returns a snapshot of the counters.
func (r *Reporter) Stats() ReporterStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.stats
	s.Queued = len(r.pending)
	s.InFlight = r.held - len(r.pending)
	return s
}

// Close stops accepting reports (Report returns ErrClosed), sends everything
// still queued (a contribution waiting for a batch of its key after that
// batch), waits for batches in flight including their retries, and returns
// nil. If ctx ends first, it drops everything still held (OnDrop, Logger)
// with an error wrapping ctx.Err() and cancels the RPCs in flight; it
// returns ctx.Err() if it held anything at that moment, and nil if not
// (everything had been sent or dropped already). Every other Close,
// concurrent or later, then returns the same. Contributions dropped during
// the flush (retries exhausted) are reported as drops as usual and do not
// make Close fail.
//
// Close returns only after every OnDrop call has returned, even when ctx
// has ended (OnDrop is meant to be short), so a caller that exits after
// Close loses nothing it was told about. OnDrop must not call Close.
//
// When Close returns, the two gauges are unregistered from
// ReporterOptions.Registerer, so a new Reporter may register there; the
// counters and the attempt histogram stay, with the drops of a Close that gave up, and a new
// Reporter there counts on in them. A nil ctx is context.Background().
func (r *Reporter) Close(ctx context.Context) error {
	if ctx == nil {
		ctx = context.Background()
	}
	// However Close returns, the Reporter is done with its metrics: free
	// their names for the Reporter that may replace this one.
	defer r.metrics.unregister()

	r.mu.Lock()
	r.closed.Store(true)
	aborted := r.aborted
	r.mu.Unlock()
	r.signal()

	// After an abort nothing is left to wait for: its sends were canceled,
	// and one whose sender ignores its ctx must not hold this Close, nor
	// one already waiting when another Close gives up.
	if !aborted {
		select {
		case <-r.done:
		case <-r.gaveUp:
		case <-ctx.Done():
			select {
			case <-r.done: // done and ctx together: done wins
			default:
				r.abort(ctx.Err())
			}
		}
	}
	// After done, or after an abort, no batch is left to resolve, so no
	// drops.Add can race with this Wait.
	r.drops.Wait()
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.closeErr
}

// abort drops everything still held, stops the dispatcher and cancels the
// sends. If it dropped anything, every Close returns cause from then on.
func (r *Reporter) abort(cause error) {
	err := fmt.Errorf("%w before delivery: %w", ErrClosed, cause)
	r.mu.Lock()
	if r.aborted {
		r.mu.Unlock()
		return
	}
	r.aborted = true
	var lost [][]*combo.Contribution
	for b := range r.inflight {
		b.resolved = true
		lost = append(lost, b.items)
	}
	clear(r.inflight)
	clear(r.keys)
	for len(r.pending) > 0 { // blocked or not, in batches as they would have gone
		items := make([]*combo.Contribution, min(len(r.pending), r.opts.BatchSize))
		for i := range items {
			items[i] = r.pending[i].c
		}
		lost = append(lost, items)
		r.pending = r.pending[len(items):]
	}
	r.pending, r.blocked = nil, 0
	n := r.held
	r.held = 0
	r.stats.Dropped += uint64(n)
	r.metrics.dropped.Add(float64(n))
	if n > 0 {
		r.closeErr = cause
	}
	if len(lost) > 0 {
		// A concurrent Close may see done before these drops end. Something
		// is held, so done has not closed and no Close has reached
		// drops.Wait yet.
		r.drops.Add(1)
		defer r.drops.Done()
	}
	close(r.gaveUp) // after drops.Add: a Close it releases waits for them
	r.mu.Unlock()

	r.cancel()
	for _, items := range lost {
		r.drop(items, err)
	}
}

func (r *Reporter) signal() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// dispatch is the single goroutine that cuts batches: it waits until
// BatchSize sendable contributions are queued (see Reporter.keys), the
// oldest of them has waited Linger, or the Reporter is closing with some
// sendable, then takes a send slot and only then cuts the batch, so
// contributions arriving while all slots are busy join it. With nothing
// sendable it sleeps until a Report or a resolve signals: never a busy loop
// while everything queued is blocked.
func (r *Reporter) dispatch() {
	defer close(r.done)
	defer r.sends.Wait()

	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		r.turns.Add(1)
		r.mu.Lock()
		if r.aborted {
			r.mu.Unlock()
			return
		}
		queued, n, closed := len(r.pending), len(r.pending)-r.blocked, r.closed.Load()
		var wait time.Duration
		if n > 0 && n < r.opts.BatchSize && !closed {
			wait = r.opts.Linger - time.Since(r.oldestSendableLocked())
		}
		r.mu.Unlock()

		if queued == 0 && closed {
			return // Report refuses new items; the sends are awaited by defer
		}
		if n == 0 || wait > 0 {
			// Nothing sendable (nothing queued, or all of it blocked until a
			// resolve frees its key and signals), or not due yet.
			var fire <-chan time.Time
			if n > 0 {
				timer.Reset(wait)
				fire = timer.C
			}
			select {
			case <-r.wake:
			case <-fire:
			case <-r.ctx.Done():
			}
			timer.Stop()
			continue
		}

		select {
		case r.slots <- struct{}{}:
		case <-r.ctx.Done():
			return
		}
		b := r.cut()
		if b == nil { // aborted meanwhile
			<-r.slots
			continue
		}
		r.sends.Add(1)
		go r.send(b)
	}
}

// cut moves up to BatchSize sendable contributions into a new in-flight
// batch.
func (r *Reporter) cut() *batch {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.aborted || len(r.pending) == r.blocked {
		return nil
	}
	b := &batch{}
	b.items, b.ats = r.cutLocked()
	r.inflight[b] = struct{}{}
	return b
}

// oldestHeldSeconds is the oldest-held gauge's value: the age of the
// oldest contribution held, 0 if none.
func (r *Reporter) oldestHeldSeconds() float64 {
	r.mu.Lock()
	defer r.mu.Unlock() // a panic must not leave the Reporter locked
	oldest := r.oldestHeldLocked()
	if oldest.IsZero() {
		return 0
	}
	return time.Since(oldest).Seconds()
}

// oldestHeldLocked is the enqueue time of the oldest contribution held,
// queued or in flight; zero if none. pending stays in enqueue order (a
// cut moves the blocked ones up, in order, and nothing is put back), so
// its first is its oldest, and so is a batch's first item.
func (r *Reporter) oldestHeldLocked() time.Time {
	var oldest time.Time
	if len(r.pending) > 0 {
		oldest = r.pending[0].at
	}
	for b := range r.inflight {
		if at := r.epoch.Add(b.ats[0]); oldest.IsZero() || at.Before(oldest) {
			oldest = at
		}
	}
	return oldest
}

// cutLocked takes up to BatchSize contributions out of pending, oldest
// first, passing over blocked ones, which keep their order; it then marks
// the taken keys busy, which blocks what is left of them in pending. A
// batch may hold several contributions of one key: the service counts a
// batch in order.
func (r *Reporter) cutLocked() (items []*combo.Contribution, ats []time.Duration) {
	n := min(len(r.pending)-r.blocked, r.opts.BatchSize)
	items, ats = make([]*combo.Contribution, 0, n), make([]time.Duration, 0, n)
	end := 0 // pending[:end] is what the scan passed: taken or blocked
	for ; end < len(r.pending) && len(items) < r.opts.BatchSize; end++ {
		p := &r.pending[end]
		if r.keys[p.key].inFlight > 0 { // busy before this cut: blocked
			continue
		}
		items, ats = append(items, p.c), append(ats, p.at.Sub(r.epoch))
		p.c = nil // taken
	}
	// Move the blocked ones of pending[:end] to its end, in order, and
	// reslice forward past the gap: that keeps memory bounded, since append
	// reallocates to about twice the live length (<= QueueSize) and the
	// old array is collected.
	w := end
	for i := end - 1; i >= 0; i-- {
		if r.pending[i].c != nil {
			w--
			r.pending[w] = r.pending[i]
		}
	}
	clear(r.pending[:w])
	r.pending = r.pending[w:]
	if len(r.pending) == 0 {
		r.pending = nil
	}
	for _, c := range items {
		k := r.keyOf(c)
		kc := r.keys[k]
		kc.queued--
		// Every item taken was of a key not busy before this cut: the first
		// of a key makes the rest of it in pending blocked, and a later one
		// in this batch was among them.
		if kc.inFlight == 0 {
			r.blocked += int(kc.queued)
		} else {
			r.blocked--
		}
		kc.inFlight++
		r.keys[k] = kc
	}
	return items, ats
}

// oldestSendableLocked is the enqueue time of the oldest sendable pending
// contribution (Linger runs from it); there must be one. It scans only the
// blocked ones ahead of it.
func (r *Reporter) oldestSendableLocked() time.Time {
	for i := range r.pending {
		if r.keys[r.pending[i].key].inFlight == 0 {
			return r.pending[i].at
		}
	}
	return time.Now() // not reached while blocked < len(pending)
}

// releaseLocked takes items off their keys' in-flight counts and reports
// whether that unblocked anything pending: the caller must then signal the
// dispatcher, since contributions that waited for the key may now go.
func (r *Reporter) releaseLocked(items ...*combo.Contribution) bool {
	unblocked := false
	for _, c := range items {
		k := r.keyOf(c)
		kc := r.keys[k]
		if kc.inFlight--; kc.inFlight == 0 && kc.queued > 0 {
			r.blocked -= int(kc.queued)
			unblocked = true
		}
		if kc.inFlight == 0 && kc.queued == 0 {
			delete(r.keys, k)
		} else {
			r.keys[k] = kc
		}
	}
	return unblocked
}

// send delivers one batch, retrying with exponential backoff, and resolves it.
// An INVALID_ARGUMENT refusal that names one item drops that item and sends
// the rest again at once: not a retry, and bounded since each such round
// removes an item.
func (r *Reporter) send(b *batch) {
	defer func() {
		<-r.slots
		r.sends.Done()
	}()

	backoff := r.opts.InitialBackoff
	retries := r.opts.retries()
	var err error
	attempt := 0    // retries so far (resends after a refused item excluded)
	resend := false // the last round dropped a refused item: go again at once
	for {
		if attempt > 0 && !resend {
			t := time.NewTimer(jittered(backoff, r.randN))
			select {
			case <-t.C:
			case <-r.ctx.Done(): // aborted: the batch is already dropped
				t.Stop()
				return
			}
			backoff = min(2*backoff, r.opts.MaxBackoff)
			if !r.countRetry(b) {
				return
			}
		}
		resend = false
		var ans answers
		if ans, err = r.attempt(b.items); err == nil {
			r.resolve(b, ans, nil)
			return
		}
		if r.ctx.Err() != nil {
			return // aborted: the batch is already dropped
		}
		if ce, ok := IsComboError(err); ok && ce.Code == CodeInvalidArgument {
			if i, ok := refusedItem(ce.Message, len(b.items)); ok && len(b.items) > 1 {
				if !r.dropItem(b, i, fmt.Errorf("combo client: contribution %d refused, not retried: %w", b.items[i].Id, err)) {
					return // aborted: the batch is already dropped
				}
				resend = true
				continue
			}
			r.resolve(b, answers{}, fmt.Errorf("combo client: batch of %d refused, not retried: %w", len(b.items), err))
			return
		}
		if attempt >= retries {
			break
		}
		attempt++
	}
	r.resolve(b, answers{}, fmt.Errorf("%w: batch of %d failed after %d attempts: %w", ErrRetriesExhausted, len(b.items), attempt+1, err))
}

// jittered is backoff with equal jitter: a uniform wait in [backoff/2,
// backoff]. Callers whose batches failed together (a service blip) then
// spread their retries instead of all coming back at once, and each still
// waits at least half its backoff.
func jittered(backoff time.Duration, randN func(time.Duration) time.Duration) time.Duration {
	half := backoff / 2
	return half + randN(backoff-half+1) // +1: backoff itself is included
}

// refusedItem returns the index of the item an INVALID_ARGUMENT message
// names, if it names one below n: combo-service's validation errors start
// with the item's path, "contributions[3]" followed by "." or ":".
func refusedItem(msg string, n int) (int, bool) {
	rest, ok := strings.CutPrefix(msg, "contributions[")
	if !ok {
		return 0, false
	}
	end := strings.IndexByte(rest, ']')
	if end <= 0 || end+1 >= len(rest) || (rest[end+1] != '.' && rest[end+1] != ':') {
		return 0, false
	}
	digits := rest[:end]
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	i, err := strconv.Atoi(digits)
	if err != nil || i >= n {
		return 0, false
	}
	return i, true
}

// dropItem drops item i of b with err and keeps the rest in flight, unless
// an abort already dropped b. The rest goes into a new slice: an RPC its ctx
// abandoned may still be reading the old one.
func (r *Reporter) dropItem(b *batch, i int, err error) bool {
	r.mu.Lock()
	if b.resolved {
		r.mu.Unlock()
		return false
	}
	item := b.items[i]
	// New slices, not the old ones shifted: an abandoned RPC's encoder
	// may still read the old items (see drop).
	b.items = slices.Concat(b.items[:i:i], b.items[i+1:])
	b.ats = slices.Concat(b.ats[:i:i], b.ats[i+1:])
	r.held--
	r.stats.Dropped++
	r.metrics.dropped.Inc() // under mu, with the stats: see resolve
	r.drops.Add(1)
	wake := r.releaseLocked(item) // its key may have no other item in b
	r.mu.Unlock()

	if wake {
		r.signal()
	}
	defer r.drops.Done()
	r.drop([]*combo.Contribution{item}, err)
	return true
}

// answers counts a sent batch's answers that are worth telling apart.
type answers struct{ duplicate, degraded uint64 }

func (r *Reporter) attempt(items []*combo.Contribution) (_ answers, err error) {
	// A BatchSender of the caller's that panics fails the attempt, retried
	// and in the end dropped like any other: the panic would otherwise
	// kill the caller's process, and every contribution queued with it.
	start := time.Now()
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %v", ErrSenderPanicked, p)
		}
		r.metrics.observeAttempt(time.Since(start), err, r.ctx.Err() != nil)
	}()
	ctx, cancel := context.WithTimeout(r.ctx, r.opts.RPCTimeout)
	defer cancel()
	// The ctx deadline alone is not enough: Kitex applies the shorter of it
	// and the client's own RPC timeout (1s from NewClient), so the call
	// option is what lets RPCTimeout exceed it.
	resp, err := r.sender.ReportContributions(ctx, &combo.ReportContributionsRequest{Contributions: items},
		callopt.WithRPCTimeout(r.opts.RPCTimeout))
	if err != nil {
		return answers{}, err
	}
	if resp == nil {
		return answers{}, fmt.Errorf("%w: nil response and nil error", ErrBadResponse)
	}
	if len(resp.Results) != len(items) {
		return answers{}, fmt.Errorf("%w: %d results for %d contributions", ErrBadResponse, len(resp.Results), len(items))
	}
	var a answers
	for _, res := range resp.Results {
		switch {
		case res == nil:
		case res.Duplicate:
			a.duplicate++
		case res.Degraded:
			a.degraded++
		}
	}
	return a, nil
}

// countRetry counts a retry of b unless it was already resolved by an abort.
func (r *Reporter) countRetry(b *batch) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if b.resolved {
		return false
	}
	r.stats.Retried += uint64(len(b.items))
	r.metrics.retried.Add(float64(len(b.items)))
	return true
}

// resolve counts b as sent (err == nil, with its answers) or dropped,
// unless an abort already dropped it, and hands a dropped batch to OnDrop.
func (r *Reporter) resolve(b *batch, ans answers, err error) {
	n := len(b.items)
	r.mu.Lock()
	if b.resolved {
		r.mu.Unlock()
		return
	}
	b.resolved = true
	delete(r.inflight, b)
	r.held -= n
	// The metrics change under mu too, with the stats: a reader that sees
	// an outcome in Stats() (a health check, a test) then sees it in the
	// metrics; counted after Unlock, a scrape could lag Stats, and a Close
	// that gave up could return before the count landed.
	if err == nil {
		r.stats.Sent += uint64(n)
		r.stats.Duplicate += ans.duplicate
		r.stats.Degraded += ans.degraded
		r.metrics.sent.Add(float64(n))
		r.metrics.duplicate.Add(float64(ans.duplicate))
		r.metrics.degraded.Add(float64(ans.degraded))
	} else {
		r.stats.Dropped += uint64(n)
		r.metrics.dropped.Add(float64(n))
		r.drops.Add(1)
	}
	wake := r.releaseLocked(b.items...)
	r.mu.Unlock()

	if wake {
		r.signal()
	}

	if err == nil {
		return
	}
	defer r.drops.Done()
	r.drop(b.items, err)
}

// dropLogIDs is the most ids one drop line names: 256 ids of 19 digits
// keep a line near 5 KB.
const dropLogIDs = 256

// drop logs items and hands OnDrop copies of them: the originals may still
// be read by an RPC that its ctx abandoned (Kitex returns at the deadline
// while its pooled goroutine goes on encoding the request), and the caller
// may keep, sort or change what it is given.
func (r *Reporter) drop(items []*combo.Contribution, err error) {
	// The ids, read before OnDrop gets the copies, which are the caller's
	// to change (or hand to another goroutine) from then on.
	ids := make([]int64, len(items))
	for i, c := range items {
		ids[i] = c.Id
	}
	if l := r.opts.Logger; l != nil {
		logDrop(l, ids, err)
	}
	if r.opts.OnDrop != nil {
		own := make([]*combo.Contribution, len(items))
		for i, c := range items {
			cp := *c // every field is a value
			own[i] = &cp
		}
		r.handToOnDrop(own, ids, err)
	}
}

// logDrop writes the drop of the contributions ids to l. Every id: a batch
// mixes the reports of concurrent callers, so the ids between its first
// and last are no range of the dropped ones, and without OnDrop these
// lines are all that names them. At most dropLogIDs a line: a batch of
// 1000 long ids made a line of about 20 KB, and container runtimes split
// lines over 16 KB, which a log shipper may then not parse as JSON.
func logDrop(l *zap.Logger, ids []int64, err error) {
	for start := 0; start < len(ids); start += dropLogIDs {
		chunk := slices.Clone(ids[start:min(start+dropLogIDs, len(ids))]) // a core may keep the field
		l.Error("combo client: contributions dropped",
			zap.Int("count", len(chunk)),
			zap.Int64("first_id", chunk[0]),
			zap.Int64("last_id", chunk[len(chunk)-1]),
			zap.Int64s("ids", chunk),
			zap.Error(err))
	}
}

// handToOnDrop calls OnDrop with items, its own copies of the contributions
// ids names. A panic in OnDrop is recovered, counted in Stats.OnDropPanics
// and logged (with the drop itself where no Logger logged it already, so
// the ids are not lost): it runs on the Reporter's goroutines, where it
// would otherwise kill the caller's process and lose every contribution
// still queued.
func (r *Reporter) handToOnDrop(items []*combo.Contribution, ids []int64, err error) {
	defer func() {
		p := recover()
		if p == nil {
			return
		}
		r.mu.Lock()
		r.stats.OnDropPanics++
		r.mu.Unlock()
		l := r.opts.Logger
		if l == nil {
			l = newDefaultDropLogger()
			logDrop(l, ids, err)
		}
		l.Error("combo client: OnDrop panicked; its contributions stay dropped (logged as dropped)",
			zap.Any("panic", p), zap.Int("count", len(ids)), zap.Stack("stack"))
	}()
	r.opts.OnDrop(items, err)
}
