package main

import (
	"bufio"
	"context"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	comboclient "github.com/combo-service/combo-service/client"
	"github.com/combo-service/combo-service/internal/testredis"
)

// README's metrics table names every metric the service exports, and the
// client Reporter's, and nothing else: gathered from the registry of a
// running service (over TLS with a client certificate, so the TLS metrics
// are registered; after an RPC, so Kitex's have series) and of a Reporter.
// Each label value those export (combo_redis_errors_total's ops, the
// outcomes, statuses, loops, loggers) must appear in its metric's row, in
// the list after "`op` is" where a row names its labels' values so.
func TestREADMEMetricsTableIsTheRegistry(t *testing.T) {
	s := startService(t, options{redis: testredis.Start(t, testredis.Options{TLS: true})})
	// startService waited for an answered RPC, which Kitex's tracer
	// records as the call ends; the stream gauges have series from the
	// first housekeeping round on.
	var families map[string]*dto.MetricFamily
	waitUntil(t, 15*time.Second, "Kitex's metrics of the first RPC and the first stream sample", func() bool {
		families = gatherService(t, s)
		for _, name := range []string{"kitex_server_throughput", "combo_stream_length", "combo_stream_pending"} {
			if _, ok := families[name]; !ok {
				return false
			}
		}
		return true
	})
	reg := prometheus.NewRegistry()
	rep, err := comboclient.NewReporter(s.rpc, comboclient.ReporterOptions{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = rep.Close(ctx)
	}()
	reporter, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range reporter {
		families[f.GetName()] = f
	}

	rows := readmeMetricsTable(t)
	matched := map[string]bool{} // table entries some metric matched
	var names []string
	for name := range families {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		row, entry := rowOf(rows, name)
		if row == "" {
			t.Errorf("README's metrics table lacks %s", name)
			continue
		}
		matched[entry] = true
		if !strings.HasPrefix(name, "combo_") {
			continue // Kitex's and Go's labels are theirs
		}
		for label, values := range labelValues(families[name]) {
			if label == "shard" || name == "combo_build_info" {
				continue // shard numbers; the build's version and revision
			}
			list := labelList(row, label)
			for _, v := range values {
				if !regexp.MustCompile(`(^|[^a-z0-9_])` + regexp.QuoteMeta(v) + `($|[^a-z0-9_])`).MatchString(list) {
					t.Errorf("README's row of %s lacks its %s %q", name, label, v)
				}
			}
		}
	}
	for _, r := range rows {
		for _, e := range r.entries {
			if !matched[e] {
				t.Errorf("README's metrics table names %s, which neither the service nor the Reporter exports", e)
			}
		}
	}
}

// gatherService parses the service's /metrics.
func gatherService(t *testing.T, s *service) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := httpGet("http://" + s.addrs.MetricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return families
}

// tableRow is one row of README's metrics table: the metric names (or
// prefixes ending in *) its first column names, and its whole text.
type tableRow struct {
	entries []string
	text    string
}

// A name, or a prefix ending in *, with its labels perhaps: `name{label}`.
var metricEntry = regexp.MustCompile("`([a-z][a-z0-9_]*\\*?)(\\{[^`}]*\\})?`")

// readmeMetricsTable reads the table that follows "| metric | what |".
func readmeMetricsTable(t *testing.T) []tableRow {
	t.Helper()
	f, err := os.Open("README.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rows []tableRow
	in := false
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "| metric | what |":
			in = true
		case !in, strings.HasPrefix(line, "|---"):
		case !strings.HasPrefix(line, "|"):
			in = false
		default:
			first, _, _ := strings.Cut(strings.TrimPrefix(line, "|"), " | ")
			r := tableRow{text: line}
			for _, m := range metricEntry.FindAllStringSubmatch(first, -1) {
				r.entries = append(r.entries, m[1])
			}
			rows = append(rows, r)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(rows) == 0 {
		t.Fatal(`README.md has no table under "| metric | what |"`)
	}
	return rows
}

// rowOf finds the row naming name, exactly or by a prefix entry ("go_*").
func rowOf(rows []tableRow, name string) (text, entry string) {
	for _, r := range rows {
		for _, e := range r.entries {
			if e == name || strings.HasSuffix(e, "*") && strings.HasPrefix(name, strings.TrimSuffix(e, "*")) {
				return r.text, e
			}
		}
	}
	return "", ""
}

// labelList is the part of row that lists label's values: from "`label`
// is" to the next code span, when a row of several labelled metrics
// names them so; else the whole row.
func labelList(row, label string) string {
	_, list, ok := strings.Cut(row, "`"+label+"` is ")
	if !ok {
		return row
	}
	list, _, _ = strings.Cut(list, "`")
	return list
}

// labelValues lists each label's values over a family's series.
func labelValues(f *dto.MetricFamily) map[string][]string {
	out := map[string][]string{}
	for _, m := range f.GetMetric() {
		for _, l := range m.GetLabel() {
			out[l.GetName()] = append(out[l.GetName()], l.GetValue())
		}
	}
	return out
}
