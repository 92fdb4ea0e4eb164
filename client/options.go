package client

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/combo-service/combo-service/kitex_gen/combo"
)

// Reporter defaults, applied by ReporterOptions.Validate to zero fields.
const (
	DefaultQueueSize   = 10000
	DefaultBatchSize   = 50
	MaxBatchSize       = 1000 // ReportContributions takes 1..1000 items
	DefaultLinger      = 20 * time.Millisecond
	DefaultConcurrency = 4
	// With these, a batch gives up after 10.7-21.4 s of backoff (50 ms
	// doubling to 5 s, ten times, jittered) plus its 11 attempts: enough to
	// ride out a replica restart or a Redis failover, and well inside the
	// service's window.dedupe (60 s by default), which makes a retry of a
	// batch that got through harmless.
	DefaultMaxRetries     = 10
	DefaultInitialBackoff = 50 * time.Millisecond
	DefaultMaxBackoff     = 5 * time.Second
	DefaultRPCTimeout     = time.Second
)

// ReporterOptions configures a Reporter. The zero value of every field means
// its default (for Registerer: no metrics; for MaxRetries: 10, and -1 means
// none).
type ReporterOptions struct {
	// QueueSize bounds the contributions the Reporter holds at once: queued
	// and in flight (being sent or waiting for a retry) together. Report
	// returns ErrQueueFull beyond it. Default 10000; must be >= BatchSize.
	QueueSize int
	// BatchSize sends a batch as soon as this many sendable contributions
	// are queued (see Concurrency). Default 50, at most 1000.
	BatchSize int
	// Linger sends a batch once the oldest sendable queued contribution has
	// waited this long, however few are queued. Default 20ms.
	Linger time.Duration
	// Concurrency is how many batches may be in flight at once, retries
	// included. Default 4. Batches in flight never share a combo key
	// (activity_id, user_id, item_type), so that each key's reports reach
	// the service in Report order: a contribution whose key is in a batch in
	// flight is not sendable; it waits, queued in order, until that batch is
	// sent or dropped, retries and their backoff included. Different keys
	// are not held up, but reports of few distinct keys fill fewer batches.
	// (After a drop the order is not guaranteed: see the package doc.)
	Concurrency int
	// MaxRetries is how many times a failed batch is sent again (so at most
	// 1+MaxRetries attempts). 0 means the default 10; a negative value
	// disables retries. A batch refused with INVALID_ARGUMENT is never
	// retried as it was: if the refusal names one of its items (e.g.
	// "contributions[3].quantity: ..."), that item alone is dropped and the
	// rest is sent again at once, which does not count as a retry;
	// otherwise the whole batch is dropped. While a batch is retried, later
	// reports of its combo keys wait for it (see Concurrency).
	MaxRetries int
	// InitialBackoff is the backoff before the first retry; it doubles for
	// each further retry up to MaxBackoff. Each wait is drawn uniformly from
	// [backoff/2, backoff] (equal jitter), so that callers whose batches
	// failed together do not retry in lockstep. Defaults 50ms and 5s; a
	// zero MaxBackoff with an InitialBackoff above 5s is InitialBackoff
	// (every wait that long), not an error. Keep the whole budget
	// (backoffs plus attempts) well inside the service's window.dedupe: a
	// retry later than that of a batch that got through counts it twice.
	InitialBackoff time.Duration
	MaxBackoff     time.Duration
	// RPCTimeout bounds each ReportContributions attempt, through its ctx
	// and a per-call callopt.WithRPCTimeout, which overrides the client's
	// own RPC timeout (NewClient's DefaultClientRPCTimeout) either way.
	// Default 1s.
	RPCTimeout time.Duration

	// OnDrop, if set, receives every contribution the Reporter gives up on
	// (retries exhausted, refused by the service, or still held when Close's
	// ctx expired) with the reason, in batches of at most BatchSize, so a
	// caller may send one on as a ReportContributions of its own.
	//
	// A contribution refused with INVALID_ARGUMENT (IsComboError(err) with
	// CodeInvalidArgument) was not counted by the service. Any other may have
	// been: any of its attempts may have been run by Redis after the service
	// stopped waiting for it (one answered UNAVAILABLE too), or it was in
	// flight when Close's ctx expired. The service recognises its id for
	// window.dedupe (60 s by default) from when it counted it, as early as
	// the batch's first attempt, 11-32 s before the drop: a re-report sent
	// from here at once is recognised if it reaches the service within the
	// rest of that (about 28 s at worst with the defaults; one that itself
	// retries through the outage may not); later, it may be counted twice.
	// Re-report a drop once, not every drop of a re-report, which loops for
	// as long as the outage lasts. The DB poll path
	// (MergeLatest over the DB rows) shows every row either way, so a late
	// re-report mainly matters for the live feed: re-report promptly or not
	// at all. A re-report with Report can be refused like any other
	// (ErrQueueFull, ErrClosed), and goes behind the reports queued since.
	//
	// OnDrop may be called from several goroutines at once and should not
	// block for long: a drop from a send holds that batch's slot while it
	// runs, and drops when Close gives up run on Close's goroutine; Close
	// waits for every OnDrop call, and OnDrop must not call Close. The slice and the contributions in it
	// are copies, the caller's to keep and change.
	OnDrop func(batch []*combo.Contribution, err error)
	// Logger logs every drop at error level (in addition to OnDrop), one
	// line per dropped batch (per 256 of its contributions, to keep lines
	// short) naming the id of each contribution in it ("ids", "count" of
	// them), with the reason. If
	// neither Logger nor OnDrop is set, NewReporter uses a default logger
	// that writes drops as JSON lines to stderr, so no drop goes unseen;
	// set OnDrop (or a Logger of your own) to handle them instead.
	Logger *zap.Logger
	// Registerer, if set, receives the Reporter's metrics:
	// combo_reporter_queue_depth, combo_reporter_oldest_held_seconds (the
	// age of the oldest contribution held, 0 when none: held past the
	// service's window.size + window.grace, reports are likely to miss
	// their window),
	// combo_reporter_reports_total{outcome="sent|queue_full|dropped|invalid|closed"}
	// (queue_full, invalid or closed once per Report call refused with
	// that error; sent or dropped once per contribution Report took),
	// combo_reporter_retries_total,
	// combo_reporter_sent_answers_total{answer="duplicate|degraded"} (of sent),
	// combo_reporter_attempts_total{result} (each ReportContributions
	// attempt: ok, or invalid_argument, unavailable, internal, timeout,
	// connection, canceled, bad_response, sender_panicked, other) and the
	// histogram combo_reporter_attempt_duration_seconds (every attempt,
	// whatever its result). Registering a second Reporter on the same Registerer fails while the
	// first is open. To run several at once, give each of them, the first
	// included, a prometheus.WrapRegistererWith of one label name with a
	// value of its own: beside a Reporter registered unwrapped, a wrapped
	// one fails too, as Prometheus takes one metric name with one set of
	// label names only (or give the others a
	// prometheus.WrapRegistererWithPrefix). Close unregisters the gauges when it returns and leaves the
	// counters and the histogram, so a Reporter that replaces a closed one may use the same
	// Registerer and counts on in them. The counters stay for as long as
	// the Registerer does: wrapping it with a label of a new value for each
	// Reporter (a generation, a tenant) keeps every closed one's series.
	Registerer prometheus.Registerer
}

// Validate applies defaults to zero fields and checks the rest, in place.
// NewReporter calls it on its own copy.
func (o *ReporterOptions) Validate() error {
	if o.QueueSize == 0 {
		o.QueueSize = DefaultQueueSize
	}
	if o.BatchSize == 0 {
		o.BatchSize = DefaultBatchSize
	}
	if o.Linger == 0 {
		o.Linger = DefaultLinger
	}
	if o.Concurrency == 0 {
		o.Concurrency = DefaultConcurrency
	}
	if o.MaxRetries == 0 {
		o.MaxRetries = DefaultMaxRetries
	}
	if o.InitialBackoff == 0 {
		o.InitialBackoff = DefaultInitialBackoff
	}
	if o.MaxBackoff == 0 {
		o.MaxBackoff = max(DefaultMaxBackoff, o.InitialBackoff)
	}
	if o.RPCTimeout == 0 {
		o.RPCTimeout = DefaultRPCTimeout
	}

	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("combo client: ReporterOptions."+format, args...))
	}
	if o.BatchSize < 1 || o.BatchSize > MaxBatchSize {
		bad("BatchSize must be 1..%d, got %d", MaxBatchSize, o.BatchSize)
	}
	if o.QueueSize < o.BatchSize {
		bad("QueueSize must be >= BatchSize (%d), got %d", o.BatchSize, o.QueueSize)
	}
	if o.Linger < 0 {
		bad("Linger must be > 0, got %v", o.Linger)
	}
	if o.Concurrency < 0 {
		bad("Concurrency must be > 0, got %d", o.Concurrency)
	}
	if o.InitialBackoff < 0 {
		bad("InitialBackoff must be > 0, got %v", o.InitialBackoff)
	}
	if o.MaxBackoff < o.InitialBackoff {
		bad("MaxBackoff must be >= InitialBackoff (%v), got %v", o.InitialBackoff, o.MaxBackoff)
	}
	if o.RPCTimeout < 0 {
		bad("RPCTimeout must be > 0, got %v", o.RPCTimeout)
	}
	return errors.Join(errs...)
}

// retries is the number of retries after the first attempt.
func (o *ReporterOptions) retries() int { return max(o.MaxRetries, 0) }

// defaultDropLogOutput is where the default drop logger writes; tests
// replace it.
var defaultDropLogOutput zapcore.WriteSyncer = zapcore.Lock(os.Stderr)

// newDefaultDropLogger is the Logger of a Reporter given neither OnDrop nor
// Logger: zap's production JSON encoding at error level, unsampled, so that
// no drop goes unlogged.
func newDefaultDropLogger() *zap.Logger {
	enc := zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig())
	return zap.New(zapcore.NewCore(enc, defaultDropLogOutput, zapcore.ErrorLevel)).
		Named("combo.reporter")
}
