package main

import (
	"sync"

	"go.uber.org/zap"
)

// readinessLog logs each change of what /readyz answers, by its kind (ok,
// redis, worker): the probes ask every few seconds and log nothing, and a
// Redis outage's warnings simply stop when it ends, so nothing said when
// the replica stopped being ready or became ready again. A change of the
// error's text within a kind (refused, then timing out) is not a change;
// the stop, logged by itself, is not logged here.
type readinessLog struct {
	log  *zap.Logger
	mu   sync.Mutex
	last string // the kind last answered; "" before the first probe
}

func (r *readinessLog) note(kind, reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if kind == r.last {
		return
	}
	was := r.last
	r.last = kind
	switch {
	case kind == "ok" && was == "":
		r.log.Info("ready: /readyz answers ok")
	case kind == "ok":
		r.log.Info("ready again: /readyz answers ok", zap.String("was", was))
	default:
		r.log.Warn("not ready: /readyz fails; reports are sent to other replicas where the callers follow it",
			zap.String("cause", kind), zap.String("reason", reason))
	}
}
