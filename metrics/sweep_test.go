package metrics

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/cloudwego/kitex/pkg/rpcinfo"
	"github.com/cloudwego/kitex/pkg/stats"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

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

// An RPC whose start was not recorded is not counted, and Finish does
// not fail on it (a tracer that panics ends Kitex's round of tracers).
func TestRPCTracerSkipsAnRPCWithoutItsStart(t *testing.T) {
	tr := NewRPCTracer(prometheus.NewRegistry())
	st := rpcinfo.NewRPCStats()
	rpcinfo.AsMutableRPCStats(st).SetLevel(stats.LevelBase)
	ri := rpcinfo.NewRPCInfo(rpcinfo.NewEndpointInfo("", "", nil, nil),
		rpcinfo.NewEndpointInfo("combo-service", "MergeLatest", nil, nil),
		rpcinfo.NewInvocation("combo-service", "MergeLatest"), rpcinfo.NewRPCConfig(), st)
	ctx := rpcinfo.NewCtxWithRPCInfo(context.Background(), ri)
	st.Record(ctx, stats.RPCFinish, stats.StatusInfo, "")
	tr.Finish(ctx)
	if n := testutil.CollectAndCount(tr.throughput, "kitex_server_throughput"); n != 0 {
		t.Fatalf("%d series for an RPC with no start recorded, want none", n)
	}
}

// A caller among the first maxCallers keeps its name for its later RPCs
// once the bound is reached: its error, or another method of it, is a new
// series of its own caller label, not one of "other".
func TestRPCTracerKnownCallerKeepsItsNamePastTheBound(t *testing.T) {
	tr := NewRPCTracer(prometheus.NewRegistry())
	for i := range maxCallers {
		finishedRPC(tr, fmt.Sprintf("caller-%d", i), "ReportContribution", stats.LevelBase, nil)
	}
	finishedRPC(tr, "caller-0", "ReportContribution", stats.LevelBase, errors.New("refused"))
	finishedRPC(tr, "caller-0", "MergeLatest", stats.LevelBase, nil)
	if got := testutil.ToFloat64(tr.throughput.WithLabelValues("caller-0", "combo-service", "ReportContribution", "error", "0")); got != 1 {
		t.Errorf("a known caller's failed RPC past the bound: counted %v times under its name, want 1", got)
	}
	if got := testutil.ToFloat64(tr.throughput.WithLabelValues("caller-0", "combo-service", "MergeLatest", "succeed", "0")); got != 1 {
		t.Errorf("a known caller's other method past the bound: counted %v times under its name, want 1", got)
	}
}

// The retry label is the RPC's retry tag (a Kitex client's retried call
// says which attempt it is): retries show apart from first attempts.
func TestRPCTracerLabelsRetries(t *testing.T) {
	tr := NewRPCTracer(prometheus.NewRegistry())
	st := rpcinfo.NewRPCStats()
	rpcinfo.AsMutableRPCStats(st).SetLevel(stats.LevelBase)
	to := rpcinfo.NewEndpointInfo("combo-service", "ReportContributions", nil, map[string]string{rpcinfo.RetryTag: "2"})
	ri := rpcinfo.NewRPCInfo(rpcinfo.NewEndpointInfo("", "", nil, nil), to,
		rpcinfo.NewInvocation("combo-service", "ReportContributions"), rpcinfo.NewRPCConfig(), st)
	ctl := &rpcinfo.TraceController{}
	ctl.Append(tr)
	ctx := ctl.DoStart(rpcinfo.NewCtxWithRPCInfo(context.Background(), ri), ri)
	ctl.DoFinish(ctx, ri, nil)
	if got := testutil.ToFloat64(tr.throughput.WithLabelValues("unknown", "combo-service", "ReportContributions", "succeed", "2")); got != 1 {
		t.Errorf("a retry (tag 2): counted %v times with retry 2, want 1", got)
	}
}
