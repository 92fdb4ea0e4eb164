package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cloudwego/kitex/pkg/kerrors"
	"github.com/cloudwego/kitex/pkg/remote"
	"github.com/prometheus/client_golang/prometheus"
)

// Metric names and the outcome label values of reports_total.
const (
	metricQueueDepth   = "combo_reporter_queue_depth"
	metricOldestHeld   = "combo_reporter_oldest_held_seconds"
	metricReportsTotal = "combo_reporter_reports_total"
	metricRetriesTotal = "combo_reporter_retries_total"
	metricAnswersTotal = "combo_reporter_sent_answers_total"
	metricAttempts     = "combo_reporter_attempts_total"
	metricAttemptTime  = "combo_reporter_attempt_duration_seconds"

	outcomeSent      = "sent"
	outcomeQueueFull = "queue_full"
	outcomeDropped   = "dropped"
	outcomeInvalid   = "invalid"
	outcomeClosed    = "closed"
)

// metrics always exist, so the hot path never checks for nil; they are only
// exported when a Registerer is given.
type metrics struct {
	sent, queueFull, dropped, retried, invalid, closed prometheus.Counter
	duplicate, degraded                                prometheus.Counter // of sent
	attempts                                           map[string]prometheus.Counter
	attemptTime                                        prometheus.Observer

	reg    prometheus.Registerer  // nil: nothing registered
	gauges []prometheus.Collector // registered, taken off by unregister
	once   sync.Once
}

func newMetrics(reg prometheus.Registerer, depth, oldest func() float64) (*metrics, error) {
	reports := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: metricReportsTotal,
		Help: "Contributions by outcome: sent (acknowledged by combo-service) and dropped " +
			"(given up on, handed to OnDrop), once per contribution Report took; queue_full " +
			"(buffer full), invalid (failed validation) and closed (after Close), once per " +
			"Report call refused.",
	}, []string{"outcome"})
	// Retries are not an outcome: a contribution retried twice and then
	// sent would count three times in a sum over outcome.
	retries := prometheus.NewCounter(prometheus.CounterOpts{
		Name: metricRetriesTotal,
		Help: "Contributions sent again after a failed attempt, once per retry.",
	})
	// Of sent, not outcomes of their own: a sum over outcome stays one
	// count per contribution.
	answers := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: metricAnswersTotal,
		Help: "Sent contributions the service answered duplicate (counted before) or " +
			"degraded (not aggregated: published on its own, a separate item in the live feed).",
	}, []string{"answer"})
	// Attempts, not contributions: the RPCs, so that a caller can tell a
	// service refusing (unavailable) from one unreachable (connection) or
	// slow (timeout) while the retries above ride it out.
	attempts := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: metricAttempts,
		Help: "ReportContributions attempts by result: ok, or why the attempt failed (" +
			"invalid_argument, unavailable, internal: the service's ComboError codes, internal also " +
			"for an exception Kitex answered in the handler's place; timeout: no answer within " +
			"RPCTimeout, a replica that could not be dialed within it included; connection: a " +
			"connection refused, or lost mid-call; canceled: abandoned by a Close that gave up; " +
			"bad_response, sender_panicked, other).",
	}, []string{"result"})
	attemptTime := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: metricAttemptTime,
		Help: "Time each ReportContributions attempt took, from the call to its answer or failure, " +
			"whatever the result.",
		// 0.5 ms to 16 s: a local service answers a batch in about a
		// millisecond; a timed-out attempt takes RPCTimeout (1 s by
		// default, longer where a caller sets it so).
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
	})
	m := &metrics{reg: reg}
	if reg != nil {
		// The gauges first: they read this Reporter, so they are what a
		// second open Reporter on reg must not take over (Register fails).
		for _, g := range []struct {
			opts prometheus.GaugeOpts
			f    func() float64
		}{{prometheus.GaugeOpts{
			Name: metricQueueDepth,
			Help: "Contributions held by the Reporter (queued, or in batches being sent or " +
				"waiting for a retry), bounded by QueueSize.",
		}, depth}, {prometheus.GaugeOpts{
			Name: metricOldestHeld,
			Help: "Age of the oldest contribution the Reporter holds (queued, or in batches being " +
				"sent or waiting for a retry), 0 when it holds none. A report that reaches the service " +
				"later than window.size + window.grace (3.2 s by default) after its window's first " +
				"report opens a window of its own: held that long, reports are likely to miss theirs.",
		}, oldest}} {
			gauge := prometheus.NewGaugeFunc(g.opts, g.f)
			if err := reg.Register(gauge); err != nil {
				m.unregister()
				return nil, fmt.Errorf("combo client: register %s: %w", g.opts.Name, err)
			}
			m.gauges = append(m.gauges, gauge)
		}
		// The counters outlive Close, so a scrape after it sees the drops
		// of a Close that gave up, and they go on counting for a Reporter
		// that replaces this one on reg (counters of a process only grow).
		// A failure half-way takes off what this call registered (not
		// the counters it adopted), so the Registerer is left as it was.
		var added []prometheus.Collector
		var err error
		if reports, err = adopt(reg, metricReportsTotal, reports, &added); err == nil {
			retries, err = adopt(reg, metricRetriesTotal, retries, &added)
		}
		if err == nil {
			answers, err = adopt(reg, metricAnswersTotal, answers, &added)
		}
		if err == nil {
			attempts, err = adopt(reg, metricAttempts, attempts, &added)
		}
		if err == nil {
			attemptTime, err = adopt(reg, metricAttemptTime, attemptTime, &added)
		}
		if err != nil {
			for _, c := range added {
				reg.Unregister(c)
			}
			m.unregister()
			return nil, err
		}
	}
	m.sent = reports.WithLabelValues(outcomeSent)
	m.queueFull = reports.WithLabelValues(outcomeQueueFull)
	m.dropped = reports.WithLabelValues(outcomeDropped)
	m.invalid = reports.WithLabelValues(outcomeInvalid)
	m.closed = reports.WithLabelValues(outcomeClosed)
	m.retried = retries
	m.duplicate = answers.WithLabelValues("duplicate")
	m.degraded = answers.WithLabelValues("degraded")
	// Every result exported from the start, at 0: a rate over a series
	// that appears with its first failure misses that failure.
	m.attempts = make(map[string]prometheus.Counter, len(attemptResults))
	for _, res := range attemptResults {
		m.attempts[res] = attempts.WithLabelValues(res)
	}
	m.attemptTime = attemptTime
	return m, nil
}

// The result label values of attempts_total.
const (
	resultOK              = "ok"
	resultInvalidArgument = "invalid_argument"
	resultUnavailable     = "unavailable"
	resultInternal        = "internal"
	resultTimeout         = "timeout"
	resultConnection      = "connection"
	resultCanceled        = "canceled"
	resultBadResponse     = "bad_response"
	resultSenderPanicked  = "sender_panicked"
	resultOther           = "other"
)

var attemptResults = []string{
	resultOK, resultInvalidArgument, resultUnavailable, resultInternal, resultTimeout,
	resultConnection, resultCanceled, resultBadResponse, resultSenderPanicked, resultOther,
}

// observeAttempt counts one ReportContributions attempt by its result and
// records how long it took; aborted says the Reporter's own context was
// canceled (a Close that gave up) by the time it ended.
func (m *metrics) observeAttempt(took time.Duration, err error, aborted bool) {
	m.attempts[attemptResult(err, aborted)].Inc()
	m.attemptTime.Observe(took.Seconds())
}

// attemptResult names why an attempt failed, for attempts_total; aborted
// as for observeAttempt.
func attemptResult(err error, aborted bool) string {
	if err == nil {
		return resultOK
	}
	if ce, ok := IsComboError(err); ok {
		switch ce.Code {
		case CodeInvalidArgument:
			return resultInvalidArgument
		case CodeUnavailable:
			return resultUnavailable
		case CodeInternal:
			return resultInternal
		}
		return resultOther
	}
	// An application exception the replica answered (Kitex recovered a
	// panic in the handler, or the replica lacks the method), which Kitex
	// wraps in ErrRemoteOrNetwork: the replica was reached, and failed.
	if _, ok := errors.AsType[*remote.TransError](err); ok {
		return resultInternal
	}
	switch {
	case errors.Is(err, ErrSenderPanicked):
		return resultSenderPanicked
	case errors.Is(err, ErrBadResponse):
		return resultBadResponse
	// Canceled before timeout: Kitex reports an attempt a Close abandoned
	// as ErrRPCTimeout caused by context.Canceled. But so it reports its
	// own timeout firing as the call returns (its timer's context is
	// canceled by then), with no Close: canceled only when the Reporter's
	// context was, else a timeout is one.
	case aborted && (errors.Is(err, context.Canceled) || errors.Is(err, kerrors.ErrCanceledByBusiness)):
		return resultCanceled
	case kerrors.IsTimeoutError(err), errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, kerrors.ErrTimeoutByBusiness):
		return resultTimeout
	case errors.Is(err, context.Canceled), errors.Is(err, kerrors.ErrCanceledByBusiness):
		return resultOther // a caller's BatchSender's own cancellation
	case errors.Is(err, kerrors.ErrGetConnection), errors.Is(err, kerrors.ErrRemoteOrNetwork),
		errors.Is(err, kerrors.ErrServiceDiscovery), errors.Is(err, kerrors.ErrNoMoreInstance),
		errors.Is(err, kerrors.ErrLoadbalance):
		return resultConnection
	}
	return resultOther
}

// adopt registers c on reg, appending it to added, or returns the
// collector of the same description already there: a closed Reporter's
// counters, left registered.
func adopt[C prometheus.Collector](reg prometheus.Registerer, name string, c C, added *[]prometheus.Collector) (C, error) {
	err := reg.Register(c)
	if err == nil {
		*added = append(*added, c)
		return c, nil
	}
	if are, ok := errors.AsType[prometheus.AlreadyRegisteredError](err); ok {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	return c, fmt.Errorf("combo client: register %s: %w", name, err)
}

// unregister takes the gauges off the Registerer, once, so that a
// Reporter replacing a closed one can register its own, and the gauges,
// which hold the Reporter, can be collected. The counters stay (see
// newMetrics).
func (m *metrics) unregister() {
	m.once.Do(func() {
		for _, g := range m.gauges {
			m.reg.Unregister(g)
		}
	})
}
