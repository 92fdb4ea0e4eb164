package main

// result is one run, as printed (table) or encoded (-json).
type result struct {
	Mode        string  `json:"mode"`
	Label       string  `json:"label,omitempty"`
	Concurrency int     `json:"concurrency"`
	Batch       int     `json:"batch,omitempty"`
	OfferedRate float64 `json:"offered_windows_per_s,omitempty"`
	Seconds     float64 `json:"seconds"`

	Calls      int64   `json:"calls"`
	Sent       int64   `json:"reports_sent"`
	Acked      int64   `json:"reports_acked"`
	Errors     int64   `json:"errors"`
	Duplicates int64   `json:"duplicates"`
	Degraded   int64   `json:"degraded"`
	Throughput float64 `json:"reports_per_s"`
	FirstError string  `json:"first_error,omitempty"`
	// FailedAttempts (reporter mode): reports in RPC attempts that failed,
	// retried or dropped; Sent and Errors count each report once.
	FailedAttempts int64 `json:"failed_attempt_reports,omitempty"`

	Latency   durStats     `json:"rpc_latency"`
	SendDelay *durStats    `json:"send_delay,omitempty"`
	CPU       cpuUse       `json:"cpu"`
	Pipelines *pipelineUse `json:"report_pipelines,omitempty"` // with -service-metrics
	Pushes    *pushCheck   `json:"pushes,omitempty"`           // nil for naive: it has no worker
	Notes     []string     `json:"notes,omitempty"`
}

func newResult(cfg config, mode string, l load) result {
	r := l.rec
	res := result{
		Mode: mode, Label: cfg.Label, Concurrency: cfg.Concurrency,
		Seconds: l.elapsed.Seconds(),
		Calls:   r.calls, Sent: r.sent, Acked: r.acked, Errors: r.errors,
		Duplicates: r.duplicates, Degraded: r.degraded,
		Latency: summarize(r.latencies), SendDelay: l.sendDelay, Notes: l.notes,
		FailedAttempts: l.failedAttempts,
	}
	if l.elapsed > 0 {
		res.Throughput = float64(r.acked) / l.elapsed.Seconds()
	}
	switch mode {
	case "batch", "reporter":
		res.Batch = cfg.Batch
	case "rate":
		res.OfferedRate = cfg.Rate
	}
	if r.firstErr != nil {
		res.FirstError = r.firstErr.Error()
	}
	return res
}

// awaitPushes waits for the run's trailing pushes (until every expected
// window is pushed, or no push has come for settle since W + grace after
// the last answer) and checks them.
func awaitPushes(cfg config, col *collector, wl *workload, l load) *pushCheck {
	col.waitFor(wl.activity, l.rec.opened+l.rec.degraded, l.end.Add(cfg.lagBase()), cfg.Settle)
	pc := runCheck(wl.activity, l.rec, col.take(wl.activity), nil, cfg.Window, cfg.Grace)
	return &pc
}
