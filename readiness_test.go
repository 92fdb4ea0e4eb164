package main

import (
	"net/http"
	"slices"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/combo-service/combo-service/conf"
	"github.com/combo-service/combo-service/internal/testwait"
)

// Each change of /readyz's kind of answer is logged once: ready, not
// ready naming why, ready again; repeated probes and a new error text of
// the same kind log nothing.
func TestReadinessLogSaysEachChangeOnce(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	r := &readinessLog{log: zap.New(core)}
	for _, p := range []struct{ kind, reason string }{
		{"ok", ""}, {"ok", ""},
		{"redis", "dial tcp: connection refused"}, {"redis", "i/o timeout"}, {"redis", "dial tcp: connection refused"},
		{"ok", ""}, {"worker", "worker not running"}, {"worker", "worker not running"},
	} {
		r.note(p.kind, p.reason)
	}
	var got []string
	for _, e := range logs.All() {
		cause, _ := e.ContextMap()["cause"].(string)
		got = append(got, e.Level.String()+" "+e.Message+" "+cause)
	}
	want := []string{
		"info ready: /readyz answers ok ",
		"warn not ready: /readyz fails; reports are sent to other replicas where the callers follow it redis",
		"info ready again: /readyz answers ok ",
		"warn not ready: /readyz fails; reports are sent to other replicas where the callers follow it worker",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("logged %q, want %q", got, want)
	}
	if reason := logs.All()[1].ContextMap()["reason"]; reason != "dial tcp: connection refused" {
		t.Errorf("the first not-ready line's reason %q, want the first error's text", reason)
	}
	if was := logs.All()[2].ContextMap()["was"]; was != "redis" {
		t.Errorf("the ready-again line's was %q, want the kind it was not ready for (redis)", was)
	}
}

// On the service: Redis stopped, the next probe logs the replica not
// ready; Redis back, the next probe logs it ready again.
func TestReadinessChangesAreLogged(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	s := startService(t, options{log: zap.New(core), mutate: func(c *conf.Config) { c.Redis.Timeout = 300 * time.Millisecond }})
	probe := func(want int) {
		t.Helper()
		testwait.For(t, "/readyz to answer "+http.StatusText(want), func() bool { code, _ := readyz(t, s); return code == want })
	}
	probe(http.StatusOK)
	s.redis.Kill()
	probe(http.StatusServiceUnavailable)
	s.redis.Start()
	probe(http.StatusOK)
	if n := logs.FilterMessageSnippet("not ready: /readyz fails").Len(); n != 1 {
		t.Errorf("logged %d not-ready lines, want 1", n)
	}
	if n := logs.FilterMessage("ready again: /readyz answers ok").Len(); n != 1 {
		t.Errorf("logged %d ready-again lines, want 1", n)
	}
}
