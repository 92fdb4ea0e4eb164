package metrics

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// The alerts take increase() and rate() of labelled counters
// (deploy/alerts.yml): each label value must be exported at 0 before its
// first increment, or Prometheus never sees that increment.
func TestLabelledCountersStartAtZero(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New(reg)
	if n := testutil.CollectAndCount(m.Reports, "combo_reports_total"); n != len(reportOutcomes) {
		t.Errorf("combo_reports_total: %d series before any report, want %d (one per outcome)", n, len(reportOutcomes))
	}
	if n := testutil.CollectAndCount(m.WindowsFlushed, "combo_windows_flushed_total"); n != len(flushedStatuses) {
		t.Errorf("combo_windows_flushed_total: %d series before any flush, want %d (one per status)", n, len(flushedStatuses))
	}
	for _, o := range []string{OutcomeUnavailable, OutcomeDegraded} {
		if v := testutil.ToFloat64(m.Reports.WithLabelValues(o)); v != 0 {
			t.Errorf("combo_reports_total{outcome=%q} = %v at start, want 0", o, v)
		}
	}
	if n := testutil.CollectAndCount(m.RedisErrors, "combo_redis_errors_total"); n != len(redisOps) {
		t.Errorf("combo_redis_errors_total: %d series before any failure, want %d (one per op)", n, len(redisOps))
	}
	if n := testutil.CollectAndCount(m.LoopPanics, "combo_loop_panics_total"); n != len(loops) {
		t.Errorf("combo_loop_panics_total: %d series before any panic, want %d (one per loop)", n, len(loops))
	}
	if v := testutil.ToFloat64(m.WindowsFlushed.WithLabelValues(FlushedStale)); v != 0 {
		t.Errorf(`combo_windows_flushed_total{status="stale"} = %v at start, want 0`, v)
	}
}

// LogSuppressed counts by logger, the unnamed one as "main".
func TestLogSuppressedByLogger(t *testing.T) {
	m := New(prometheus.NewRegistry())
	m.LogSuppressed("worker", 0)
	m.LogSuppressed("worker", 3)
	m.LogSuppressed("", 2)
	if got := testutil.ToFloat64(m.LogLinesSuppressed.WithLabelValues("worker")); got != 3 {
		t.Errorf("worker: %v, want 3", got)
	}
	if got := testutil.ToFloat64(m.LogLinesSuppressed.WithLabelValues("main")); got != 2 {
		t.Errorf("main: %v, want 2", got)
	}
}

// combo_redis_logins_refused has both its series at 0 from the start,
// as README says ("0 with the embedded Redis"), before the eviction
// watch's first reading sets them.
func TestLoginsRefusedStartsAtZeroByNodeAndSentinel(t *testing.T) {
	m := New(prometheus.NewRegistry())
	if n := testutil.CollectAndCount(m.RedisLoginsRefused, "combo_redis_logins_refused"); n != 2 {
		t.Fatalf("combo_redis_logins_refused: %d series at start, want 2 (node, sentinel)", n)
	}
	for _, by := range []string{"node", "sentinel"} {
		if v := testutil.ToFloat64(m.RedisLoginsRefused.WithLabelValues(by)); v != 0 {
			t.Errorf("combo_redis_logins_refused{by=%q} = %v at start, want 0", by, v)
		}
	}
}

// withoutAsides is s with its parenthesized text left out.
func withoutAsides(s string) string {
	var b strings.Builder
	depth := 0
	for _, r := range s {
		switch {
		case r == '(':
			depth++
		case r == ')' && depth > 0:
			depth--
		case depth == 0:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// README names each value of combo_redis_errors_total's op and
// combo_loop_panics_total's loop in the list after "`op` is" and "`loop`
// is", as a value of the list, not only as a word of its prose: an
// on-call querying {loop="unread_watch"} must find the series the service
// exports (the README test matches words anywhere in the row: "unread"
// and "pipeline" are words of its prose).
func TestREADMEListsEachOpAndLoop(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for label, values := range map[string][]string{"op": redisOps, "loop": loops} {
		_, list, ok := strings.Cut(string(readme), "`"+label+"` is ")
		if !ok {
			t.Fatalf("README has no list after \"`%s` is\"", label)
		}
		list, _, _ = strings.Cut(list, "\n")
		list, _, _ = strings.Cut(list, "`")
		list = withoutAsides(list)
		for _, v := range values {
			// An item of the list: after its start, a comma, a colon or
			// "or", before a comma, a colon, a full stop or its end.
			if !regexp.MustCompile(`(^|[,:]|\bor) *` + regexp.QuoteMeta(v) + ` *([,.:|]|$)`).MatchString(list) {
				t.Errorf("README's list of %s values lacks %q: %s", label, v, list)
			}
		}
	}
}
