package metrics

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/cloudwego/kitex/pkg/rpcinfo"
	"github.com/cloudwego/kitex/pkg/stats"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
)

// finishedRPC runs one RPC through tr with Kitex's own trace controller, as
// Kitex's server does: DoStart records the start, DoFinish the finish and
// err, then calls the tracer.
func finishedRPC(tr *RPCTracer, caller, method string, level stats.Level, err error) {
	st := rpcinfo.NewRPCStats()
	rpcinfo.AsMutableRPCStats(st).SetLevel(level)
	ri := rpcinfo.NewRPCInfo(
		rpcinfo.NewEndpointInfo(caller, "", nil, nil),
		rpcinfo.NewEndpointInfo("combo-service", method, nil, nil),
		rpcinfo.NewInvocation("combo-service", method), rpcinfo.NewRPCConfig(), st)
	ctl := &rpcinfo.TraceController{}
	ctl.Append(tr)
	ctx := ctl.DoStart(rpcinfo.NewCtxWithRPCInfo(context.Background(), ri), ri)
	ctl.DoFinish(ctx, ri, err)
}

func histogramCount(t *testing.T, h *prometheus.HistogramVec, values ...string) uint64 {
	t.Helper()
	var m dto.Metric
	if err := h.WithLabelValues(values...).(prometheus.Histogram).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}

func TestRPCTracerCountsByMethodAndStatus(t *testing.T) {
	tr := NewRPCTracer(prometheus.NewRegistry())
	for range 3 {
		finishedRPC(tr, "activity-service", "ReportContribution", stats.LevelBase, nil)
	}
	finishedRPC(tr, "", "ReportContributions", stats.LevelBase, nil)
	finishedRPC(tr, "", "ReportContributions", stats.LevelBase, errors.New("connection reset"))
	// With stats disabled Kitex records no times: nothing is counted.
	finishedRPC(tr, "", "MergeLatest", stats.LevelDisabled, nil)

	cases := []struct {
		labels []string
		want   float64
	}{
		{[]string{"activity-service", "combo-service", "ReportContribution", "succeed", "0"}, 3},
		{[]string{"unknown", "combo-service", "ReportContributions", "succeed", "0"}, 1},
		{[]string{"unknown", "combo-service", "ReportContributions", "error", "0"}, 1},
	}
	for _, c := range cases {
		if got := testutil.ToFloat64(tr.throughput.WithLabelValues(c.labels...)); got != c.want {
			t.Errorf("kitex_server_throughput%v = %v, want %v", c.labels, got, c.want)
		}
		if got := histogramCount(t, tr.latency, c.labels...); got != uint64(c.want) {
			t.Errorf("kitex_server_latency_us_count%v = %d, want %v", c.labels, got, c.want)
		}
	}
	if n := testutil.CollectAndCount(tr.throughput); n != len(cases) {
		t.Errorf("kitex_server_throughput has %d series, want %d (a disabled RPC must not add one)", n, len(cases))
	}
}

// Many RPCs finishing at once on the same and new label sets all count
// (run with -race).
func TestRPCTracerConcurrentFinish(t *testing.T) {
	tr := NewRPCTracer(prometheus.NewRegistry())
	methods := []string{"ReportContribution", "ReportContributions", "MergeLatest"}
	const workers, each = 8, 200
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for range each {
				finishedRPC(tr, "", methods[w%len(methods)], stats.LevelBase, nil)
			}
		})
	}
	wg.Wait()
	var total float64
	for _, m := range methods {
		total += testutil.ToFloat64(tr.throughput.WithLabelValues("unknown", "combo-service", m, "succeed", "0"))
	}
	if total != workers*each {
		t.Fatalf("counted %v RPCs, want %d", total, workers*each)
	}
}

// A caller names itself (TTHeader's from_service, read even from a
// request refused as garbage): a peer sending a new name with each request
// must not add series, and memory, without bound. Every RPC still counts.
func TestRPCTracerBoundsCallers(t *testing.T) {
	tr := NewRPCTracer(prometheus.NewRegistry())
	const callers = 10 * maxCallers
	for i := range callers {
		finishedRPC(tr, fmt.Sprintf("caller-%d", i), "ReportContribution", stats.LevelBase, nil)
	}
	if n := testutil.CollectAndCount(tr.throughput); n > maxCallers+1 {
		t.Errorf("kitex_server_throughput has %d series after %d callers, want at most %d", n, callers, maxCallers+1)
	}
	if got := testutil.ToFloat64(tr.throughput.WithLabelValues("caller-0", "combo-service", "ReportContribution", "succeed", "0")); got != 1 {
		t.Errorf("the first caller's RPC counted %v times under its own name, want 1", got)
	}
	var total float64
	ch := make(chan prometheus.Metric, callers)
	tr.throughput.Collect(ch)
	close(ch)
	for m := range ch {
		var d dto.Metric
		if err := m.Write(&d); err != nil {
			t.Fatal(err)
		}
		total += d.GetCounter().GetValue()
	}
	if total != callers {
		t.Errorf("counted %v RPCs, want %d", total, callers)
	}
}

// A caller name that is not UTF-8 (a Latin-1 "café", or the header of a
// request refused as garbage) is no Prometheus label value: WithLabelValues
// panicked, Kitex recovered and logged a stack trace, and the RPC was never
// counted.
func TestRPCTracerCountsACallerNameThatIsNotUTF8AsOther(t *testing.T) {
	tr := NewRPCTracer(prometheus.NewRegistry())
	for range 3 {
		finishedRPC(tr, "caf\xe9", "ReportContribution", stats.LevelBase, nil)
	}
	if got := testutil.ToFloat64(tr.throughput.WithLabelValues(callerOther, "combo-service", "ReportContribution", "succeed", "0")); got != 3 {
		t.Errorf("RPCs of a caller named %q counted %v times as %q, want 3", "caf\xe9", got, callerOther)
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if len(tr.callers) != 0 {
		t.Errorf("the name took a caller slot: %v", tr.callers)
	}
}

// BenchmarkRPCTracerFinish is the tracer's cost per RPC once its label set
// has been seen: go test -run '^$' -bench RPCTracer -benchmem ./metrics/
func BenchmarkRPCTracerFinish(b *testing.B) {
	tr := NewRPCTracer(prometheus.NewRegistry())
	ri, _ := anonymousCall("ReportContribution")
	ctx := rpcinfo.NewCtxWithRPCInfo(context.Background(), ri)
	rpcinfo.Record(ctx, ri, stats.RPCStart, nil)
	rpcinfo.Record(ctx, ri, stats.RPCFinish, nil)
	b.ReportAllocs()
	for b.Loop() {
		tr.Finish(ctx)
	}
}

// An RPC whose start was not recorded is not counted, and Finish does
// not fail on it (a tracer that panics ends Kitex's round of tracers).
func TestRPCTracerSkipsAnRPCWithoutItsStart(t *testing.T) {
	tr := NewRPCTracer(prometheus.NewRegistry())
	ri, st := anonymousCall("MergeLatest")
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

// anonymousCall is the RPC info and stats of a call of method by a caller
// that sent no name, its stats recorded at the base level.
func anonymousCall(method string) (rpcinfo.RPCInfo, rpcinfo.RPCStats) {
	st := rpcinfo.NewRPCStats()
	rpcinfo.AsMutableRPCStats(st).SetLevel(stats.LevelBase)
	return rpcinfo.NewRPCInfo(rpcinfo.NewEndpointInfo("", "", nil, nil),
		rpcinfo.NewEndpointInfo("combo-service", method, nil, nil),
		rpcinfo.NewInvocation("combo-service", method), rpcinfo.NewRPCConfig(), st), st
}
