package main

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cloudwego/kitex/client/callopt"

	"github.com/combo-service/combo-service/internal/testredis"
	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/repo"
)

// repoClient answers the report RPCs in process with the service's own
// repo (its Lua scripts and coalescer), as the handler does, without Kitex.
type repoClient struct{ r *repo.Repo }

func answer(r repo.ReportResult) *combo.ReportContributionResponse {
	return &combo.ReportContributionResponse{WindowId: r.WindowID, WindowQuantity: r.WindowQuantity,
		Duplicate: r.Outcome == repo.Duplicate, Degraded: r.Outcome == repo.Degraded}
}

func (c repoClient) ReportContribution(ctx context.Context, req *combo.ReportContributionRequest, _ ...callopt.Option) (*combo.ReportContributionResponse, error) {
	res, err := c.r.Report(ctx, []*combo.Contribution{req.Contribution})
	if err != nil {
		return nil, err
	}
	return answer(res[0]), nil
}

func (c repoClient) ReportContributions(ctx context.Context, req *combo.ReportContributionsRequest, _ ...callopt.Option) (*combo.ReportContributionsResponse, error) {
	res, err := c.r.Report(ctx, req.Contributions)
	if err != nil {
		return nil, err
	}
	out := &combo.ReportContributionsResponse{}
	for _, r := range res {
		out.Results = append(out.Results, answer(r))
	}
	return out, nil
}

func (c repoClient) MergeLatest(context.Context, *combo.MergeLatestRequest, ...callopt.Option) (*combo.MergeLatestResponse, error) {
	return nil, errors.New("not used by these tests")
}

// inProcessBench is a bench over a fresh redis-server and the service's
// repo, with a window of an hour: every window stays open, as the curve
// and memory modes need (the service there runs with COMBO_WINDOW_SIZE=50s).
func inProcessBench(t *testing.T, cfg config) *bench {
	t.Helper()
	rdb := testredis.Start(t, testredis.Options{}).Client()
	ctx := context.Background()
	r := repo.New(rdb, repo.Settings{Window: time.Hour, Dedupe: time.Minute, Stale: 2 * time.Hour,
		Timeout: 10 * time.Second, Shards: 1, StreamMaxLen: 10_000_000})
	if err := r.LoadScripts(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.EnsureGroups(ctx); err != nil {
		t.Fatal(err)
	}
	col, err := startCollector(ctx, rdb)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(col.close)
	return &bench{cfg: cfg, rdb: rdb, col: col, cli: repoClient{r}, cpu: newCPUSampler(0, redisPID(ctx, rdb, 0))}
}

// Each ratio of a compare run is its own mode's throughput over naive's
// (the runs go naive, single, batch, reporter, floor: an index off by one
// would publish one mode's figure under another's name).
func TestCompareRatiosNameTheirRuns(t *testing.T) {
	b := inProcessBench(t, config{Concurrency: 2, Reports: 200, Keys: 8, Batch: 50, ReporterConcurrency: 1,
		ReporterLinger: 5 * time.Millisecond, Window: 10 * time.Millisecond, Settle: 50 * time.Millisecond})
	out, err := b.compare()
	if err != nil {
		t.Fatal(err)
	}
	c := out.(comparison)
	by := map[string]float64{}
	for _, r := range c.Runs {
		by[r.Mode] = r.Throughput
	}
	for name, mode := range map[string]string{"single_vs_naive": "single", "batch50_vs_naive": "batch", "reporter_vs_naive": "reporter"} {
		if want := by[mode] / by["naive"]; by[mode] == 0 || c.Ratios[name] != want {
			t.Errorf("%s = %v, want %s/naive = %v", name, c.Ratios[name], mode, want)
		}
	}
}
