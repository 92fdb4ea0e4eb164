package main

import (
	"bufio"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/combo-service/combo-service/conf"
	"github.com/combo-service/combo-service/metrics"
)

// The /metrics endpoint counts RPCs (Kitex's tracer, on the base stats
// level) and reports by outcome, and tells the stream's bound.
func TestMetricsCountRPCsAndReports(t *testing.T) {
	s := startService(t, options{mutate: func(c *conf.Config) { c.Redis.StreamMaxLen = 250_000 }})
	a := newActivity()
	for range 3 {
		s.report(gift(a, 1, "firework", 1))
	}
	dup := gift(a, 1, "firework", 1)
	s.report(dup)
	s.report(dup)

	// Kitex records a call in its tracer after sending the answer: the
	// fifth call's figures may come a moment after its answer.
	// callee is the server's own name, combo-service, which dashboards over
	// many services filter on.
	kitex := []*regexp.Regexp{ // 5 calls, and a latency observed for each
		regexp.MustCompile(`(?m)^kitex_server_throughput\{[^}]*callee="combo-service"[^}]*method="ReportContribution"[^}]*status="succeed"[^}]*\} 5$`),
		regexp.MustCompile(`(?m)^kitex_server_latency_us_count\{[^}]*method="ReportContribution"[^}]*\} 5$`),
	}
	var text string
	waitUntil(t, 10*time.Second, "Kitex's figures of the five calls", func() bool {
		text = scrape(t, s)
		return kitex[0].MatchString(text) && kitex[1].MatchString(text)
	})
	for _, want := range []string{
		`combo_reports_total{outcome="ok"} 4`,
		`combo_reports_total{outcome="duplicate"} 1`,
		// One call at a time: five pipelines of one report each.
		"combo_report_pipeline_reports_sum 5\n",
		"combo_report_pipeline_reports_count 5\n",
		"combo_report_pipeline_seconds_count 5\n",
		// deploy/alerts.yml's ComboStreamNearMaxLen compares the stream
		// with it.
		"combo_stream_max_length 250000\n",
		// The sampled loggers' counts of lines left out, from the start.
		`combo_log_lines_suppressed_total{logger="handler"} 0`,
		`combo_log_lines_suppressed_total{logger="worker"} 0`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	// Which build runs (the start log says it too).
	if re := `(?m)^go_build_info\{[^}]*version="[^"]+"[^}]*\} 1$`; !regexp.MustCompile(re).MatchString(text) {
		t.Errorf("/metrics does not match %s", re)
	}
}

// A connection to the metrics port that sent a request and then nothing is
// closed once idle that long (main passes rpcserver.MaxConnIdle, as on
// the RPC port): the metrics server had no idle timeout, so every such
// connection (a health checker that opens one per probe and never closes
// it) kept its file descriptor and goroutine for as long as the process
// lived, fds that Redis connections need too.
func TestMetricsPortClosesIdleConnections(t *testing.T) {
	const idle = 200 * time.Millisecond
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, addr := serveMetrics(ln, conf.Metrics{}, prometheus.NewRegistry(), nil, nil, nil, zap.NewNop(), idle)
	defer srv.Close()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("GET /healthz HTTP/1.1\r\nHost: combo\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.Close {
		t.Fatal("the server closed the connection after the request: nothing left to test")
	}
	// Kept alive and idle: the server must close it, not wait for ever.
	wait := idle + 10*time.Second
	start := time.Now()
	_ = conn.SetReadDeadline(start.Add(wait))
	_, err = conn.Read(make([]byte, 1))
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("an idle metrics connection is still open after %s", wait)
	}
	if took := time.Since(start); took < idle/2 {
		t.Fatalf("closed after %s idle, well before the idle timeout (%s): a scraper's kept-alive connection should last", took, idle)
	}
}

// A panic in a shared report pipeline is counted under report_pipeline,
// the loop whose runbook ComboLoopPanics names, and logged with its stack.
func TestReportPipelinePanicsAreCountedAsTheirLoop(t *testing.T) {
	m := metrics.New(prometheus.NewRegistry())
	core, logs := observer.New(zap.ErrorLevel)
	s := reportPathSettings(repoSettings(conf.Default()), m, zap.New(core))
	s.OnPanic("boom", []byte("goroutine 1"))
	if n := testutil.ToFloat64(m.LoopPanics.WithLabelValues(metrics.LoopReportPipeline)); n != 1 {
		t.Fatalf("combo_loop_panics_total{loop=report_pipeline} = %v, want 1", n)
	}
	if logs.FilterMessageSnippet("recovered panic in a report pipeline").FilterField(zap.ByteString("stack", []byte("goroutine 1"))).
		FilterField(zap.Any("panic", "boom")).Len() != 1 {
		t.Fatalf("logs %v, want the panic logged once with its value and stack", logs.All())
	}
}
