package main

import (
	"bytes"
	"log"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/combo-service/combo-service/conf"
)

// failingAccepts is a listener whose first accepts fail as an accept does
// when the process is out of file descriptors (a temporary error).
type failingAccepts struct {
	net.Listener
	mu    sync.Mutex
	fails int
}

type emfile struct{}

func (emfile) Error() string   { return "accept4: too many open files" }
func (emfile) Timeout() bool   { return false }
func (emfile) Temporary() bool { return true }

func (l *failingAccepts) Accept() (net.Conn, error) {
	l.mu.Lock()
	if l.fails > 0 {
		l.fails--
		l.mu.Unlock()
		return nil, emfile{}
	}
	l.mu.Unlock()
	return l.Listener.Accept()
}

// What net/http logs of the metrics server (an accept failing for want of
// file descriptors, a handler's panic) is a line of the service's logger,
// named metrics_server, not a line of Go's standard logger: that wrote
// plain text to stderr among the JSON lines, which a log shipper parsing
// JSON drops or keeps unparsed, at the hour the operator looks for why the
// process ran out of file descriptors.
func TestMetricsServerErrorsGoToTheServiceLogger(t *testing.T) {
	var std bytes.Buffer
	prevOut, prevFlags := log.Writer(), log.Flags()
	log.SetOutput(&std)
	defer func() { log.SetOutput(prevOut); log.SetFlags(prevFlags) }()

	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := &failingAccepts{Listener: inner, fails: 2}
	core, logs := observer.New(zapcore.DebugLevel)
	srv, addr := serveMetrics(ln, conf.Metrics{}, prometheus.NewRegistry(), nil, nil, nil, zap.New(core), time.Minute)
	defer srv.Close()
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if std.Len() > 0 {
		t.Errorf("the metrics server wrote to Go's standard logger: %q", std.String())
	}
	var found bool
	for _, e := range logs.All() {
		if strings.Contains(e.Message, "too many open files") {
			found = true
			if e.LoggerName != "metrics_server" || e.Level < zapcore.WarnLevel {
				t.Errorf("logged %q as logger %q at %s, want logger metrics_server at warn or above", e.Message, e.LoggerName, e.Level)
			}
		}
	}
	if !found {
		t.Errorf("the failed accepts are not in the service's log: %v", logs.All())
	}
}
