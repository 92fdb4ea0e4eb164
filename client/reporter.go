package client

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cloudwego/kitex/client/callopt"

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
