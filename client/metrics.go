package client

import (
	"errors"
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Metric names and the outcome label values of reports_total.
const (
	metricQueueDepth   = "combo_reporter_queue_depth"
	metricOldestHeld   = "combo_reporter_oldest_held_seconds"
	metricReportsTotal = "combo_reporter_reports_total"
	metricRetriesTotal = "combo_reporter_retries_total"
	metricAnswersTotal = "combo_reporter_sent_answers_total"

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
			if retries, err = adopt(reg, metricRetriesTotal, retries, &added); err == nil {
				answers, err = adopt(reg, metricAnswersTotal, answers, &added)
			}
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
	return m, nil
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
