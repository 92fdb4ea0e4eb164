package client

import (
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Metric names and the outcome label values of reports_total.
const (
	metricQueueDepth   = "combo_reporter_queue_depth"
	metricReportsTotal = "combo_reporter_reports_total"
	metricRetriesTotal = "combo_reporter_retries_total"
	metricAnswersTotal = "combo_reporter_sent_answers_total"

	outcomeSent      = "sent"
	outcomeQueueFull = "queue_full"
	outcomeDropped   = "dropped"
	outcomeInvalid   = "invalid"
)

// metrics always exist, so the hot path never checks for nil; they are only
// exported when a Registerer is given.
type metrics struct {
	sent, queueFull, dropped, retried, invalid prometheus.Counter
	duplicate, degraded                        prometheus.Counter // of sent

	reg            prometheus.Registerer // nil: nothing registered
	registered     []prometheus.Collector
	unregisterOnce sync.Once
}

func newMetrics(reg prometheus.Registerer, depth func() float64) (*metrics, error) {
	reports := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: metricReportsTotal,
		Help: "Contributions by outcome: sent (acknowledged by combo-service) and dropped " +
			"(given up on, handed to OnDrop), once per contribution Report took; queue_full " +
			"(buffer full) and invalid (failed validation), once per Report call refused.",
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
	m := &metrics{
		sent:      reports.WithLabelValues(outcomeSent),
		queueFull: reports.WithLabelValues(outcomeQueueFull),
		dropped:   reports.WithLabelValues(outcomeDropped),
		retried:   retries,
		invalid:   reports.WithLabelValues(outcomeInvalid),
		duplicate: answers.WithLabelValues("duplicate"),
		degraded:  answers.WithLabelValues("degraded"),
		reg:       reg,
	}
	if reg == nil {
		return m, nil
	}
	gauge := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: metricQueueDepth,
		Help: "Contributions held by the Reporter (queued or in flight), bounded by QueueSize.",
	}, depth)
	for _, c := range []struct {
		name string
		c    prometheus.Collector
	}{{metricQueueDepth, gauge}, {metricReportsTotal, reports}, {metricRetriesTotal, retries}, {metricAnswersTotal, answers}} {
		if err := reg.Register(c.c); err != nil {
			m.unregister() // the ones registered so far
			return nil, fmt.Errorf("combo client: register %s: %w", c.name, err)
		}
		m.registered = append(m.registered, c.c)
	}
	return m, nil
}

// unregister takes the collectors off the Registerer, once: a closed
// Reporter's metrics are final, and the Registerer must take a new
// Reporter's (same names) after Close. It also lets the gauge, which
// holds the Reporter, be collected.
func (m *metrics) unregister() {
	m.unregisterOnce.Do(func() {
		for _, c := range m.registered {
			m.reg.Unregister(c)
		}
	})
}
