package metrics

import (
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cloudwego/kitex/pkg/rpcinfo"
	"github.com/cloudwego/kitex/pkg/stats"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
)

// Every label value constant of metrics.go is exported at 0: the lists New
// walks must hold each Outcome*, Flushed*, Op* and Loop* constant, or a
// value dropped from its list starts at its first increment, unseen by
// increase() (TestLabelledCountersStartAtZero compares with the lists
// themselves).
func TestEveryLabelConstantIsExportedAtZero(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "metrics.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	consts := map[string][]string{} // prefix -> values
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			v := s.(*ast.ValueSpec)
			for i, n := range v.Names {
				for _, p := range []string{"Outcome", "Flushed", "Op", "Loop"} {
					if strings.HasPrefix(n.Name, p) && i < len(v.Values) {
						lit, ok := v.Values[i].(*ast.BasicLit)
						if !ok {
							t.Fatalf("%s is not a literal", n.Name)
						}
						s, _ := strconv.Unquote(lit.Value)
						consts[p] = append(consts[p], s)
					}
				}
			}
		}
	}
	m := New(prometheus.NewRegistry())
	vecs := map[string]*prometheus.CounterVec{"Outcome": m.Reports, "Flushed": m.WindowsFlushed, "Op": m.RedisErrors, "Loop": m.LoopPanics}
	for p, vec := range vecs {
		if len(consts[p]) == 0 {
			t.Fatalf("no %s* constants found", p)
		}
		ch := make(chan prometheus.Metric, 64)
		vec.Collect(ch)
		close(ch)
		var got []string
		for mt := range ch {
			var d dto.Metric
			if err := mt.Write(&d); err != nil {
				t.Fatal(err)
			}
			got = append(got, d.GetLabel()[0].GetValue())
		}
		for _, want := range consts[p] {
			if !slices.Contains(got, want) {
				t.Errorf("%s %q not exported at 0 (series: %v)", p, want, got)
			}
		}
	}
}

// kitex_server_latency_us is in microseconds: an RPC of 20 ms observes
// about 20,000.
func TestRPCTracerLatencyIsMicroseconds(t *testing.T) {
	tr := NewRPCTracer(prometheus.NewRegistry())
	ri, _ := anonymousCall("MergeLatest")
	ctl := &rpcinfo.TraceController{}
	ctl.Append(tr)
	ctx := ctl.DoStart(rpcinfo.NewCtxWithRPCInfo(context.Background(), ri), ri)
	time.Sleep(20 * time.Millisecond)
	ctl.DoFinish(ctx, ri, nil)
	var d dto.Metric
	if err := tr.latency.WithLabelValues("unknown", "combo-service", "MergeLatest", "succeed", "0").(prometheus.Histogram).Write(&d); err != nil {
		t.Fatal(err)
	}
	if sum := d.GetHistogram().GetSampleSum(); d.GetHistogram().GetSampleCount() != 1 || sum < 20_000 || sum > 5_000_000 {
		t.Fatalf("observed %v (count %d) for a 20 ms RPC, want about 20000 µs", sum, d.GetHistogram().GetSampleCount())
	}
}

// A caller name of exactly maxCallerLen bytes is still its own label; only
// a longer one counts as other.
func TestRPCTracerCallerNameAtTheLengthBound(t *testing.T) {
	tr := NewRPCTracer(prometheus.NewRegistry())
	name := strings.Repeat("c", maxCallerLen)
	finishedRPC(tr, name, "ReportContribution", stats.LevelBase, nil)
	finishedRPC(tr, name+"c", "ReportContribution", stats.LevelBase, nil)
	if got := testutil.ToFloat64(tr.throughput.WithLabelValues(name, "combo-service", "ReportContribution", "succeed", "0")); got != 1 {
		t.Errorf("a %d-byte caller counted %v times under its name, want 1", maxCallerLen, got)
	}
	if got := testutil.ToFloat64(tr.throughput.WithLabelValues(callerOther, "combo-service", "ReportContribution", "succeed", "0")); got != 1 {
		t.Errorf("a %d-byte caller counted %v times as other, want 1", maxCallerLen+1, got)
	}
}
