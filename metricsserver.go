package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"github.com/combo-service/combo-service/conf"
	"github.com/combo-service/combo-service/repo"
	"github.com/combo-service/combo-service/worker"
)

// maxProfile bounds the seconds a pprof profile or trace may be asked
// for: ten times pprof's default of 30 s.
const maxProfile = 5 * time.Minute

// boundedProfile serves h, a pprof profile, trace or delta of a named
// profile, unless its seconds pass maxProfile. pprof takes any length, and
// a caller asking for hours held the tracer (one at a time) and its cost
// on the process that long.
func boundedProfile(h http.HandlerFunc) http.HandlerFunc {
	return func(rw http.ResponseWriter, r *http.Request) {
		if v := r.FormValue("seconds"); v != "" {
			// NaN and ±Inf parse too: refused by the range check.
			if sec, err := strconv.ParseFloat(v, 64); err == nil && !(sec <= maxProfile.Seconds()) {
				http.Error(rw, fmt.Sprintf("seconds: at most %d", int(maxProfile.Seconds())), http.StatusBadRequest)
				return
			}
		}
		h(rw, r)
	}
}

// serveMetrics serves /metrics, /healthz (the process is alive) and
// /readyz (Redis answers and takes writes, and the worker runs; not once
// stopping is closed, when the service has begun to shut down).
// ln is the listener on cfg.Addr, nil when it is empty (metrics off); a
// connection idle for idle is closed (main: rpcserver.MaxConnIdle).
func serveMetrics(ln net.Listener, cfg conf.Metrics, reg *prometheus.Registry, store *repo.Repo, w *worker.Worker, stopping <-chan struct{}, log *zap.Logger, idle time.Duration) (*http.Server, string) {
	if ln == nil {
		return nil, ""
	}
	mux := http.NewServeMux()
	if cfg.Pprof {
		mux.HandleFunc("/debug/pprof/", boundedProfile(pprof.Index)) // named profiles take seconds too (a delta)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", boundedProfile(pprof.Profile))
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", boundedProfile(pprof.Trace))
	}
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("/healthz", func(rw http.ResponseWriter, _ *http.Request) { _, _ = rw.Write([]byte("ok\n")) })
	ready := &readinessLog{log: log}
	mux.HandleFunc("/readyz", func(rw http.ResponseWriter, r *http.Request) {
		// From SIGTERM on: the RPC listener is closed (or closing) while
		// this server still answers, for as long as the held windows take
		// to come due; a load balancer or a caller's discovery that reads
		// ready then sends reports that cannot land here.
		select {
		case <-stopping:
			http.Error(rw, "stopping: shutting down; send reports to another replica", http.StatusServiceUnavailable)
			return
		default:
		}
		ctx, cancel := context.WithTimeout(r.Context(), time.Second)
		defer cancel()
		if err := store.Ready(ctx); err != nil {
			if r.Context().Err() == nil { // not a probe that gave up
				ready.note("redis", err.Error())
			}
			http.Error(rw, "redis: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		if !w.Running() {
			ready.note("worker", "worker not running")
			http.Error(rw, "worker not running", http.StatusServiceUnavailable)
			return
		}
		ready.note("ok", "")
		_, _ = rw.Write([]byte("ok\n"))
	})
	// IdleTimeout as on the RPC port (main passes rpcserver.MaxConnIdle): without it a
	// connection kept alive after a request and never used again (a probe
	// that opens one each time and does not close it) held its file
	// descriptor and goroutine for as long as the process lived, and Redis
	// connections need those descriptors too. A scraper's connection,
	// reused at every scrape, is never idle that long.
	// What net/http logs (an accept failing for want of file descriptors,
	// a handler's panic) is a line of the service's log, at warn: without
	// it, Go's standard logger wrote plain text to stderr among the JSON
	// lines. Not sampled: net/http backs a failing accept off to one a
	// second, and a panic is its request's.
	errorLog, _ := zap.NewStdLogAt(log.Named("metrics_server"), zap.WarnLevel) // fails only for an unknown level
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: idle, ErrorLog: errorLog}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server failed", zap.Error(err))
		}
	}()
	return srv, ln.Addr().String()
}
