package main

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudwego/kitex/client/callopt"

	"github.com/combo-service/combo-service/kitex_gen/combo"
)

// flakyClient fails every other ReportContributions before the service
// sees it, so the Reporter retries that batch.
type flakyClient struct {
	repoClient
	n *atomic.Int64
}

func (c flakyClient) ReportContributions(ctx context.Context, req *combo.ReportContributionsRequest, o ...callopt.Option) (*combo.ReportContributionsResponse, error) {
	if c.n.Add(1)%2 == 1 {
		return nil, errors.New("connection reset before the service saw it")
	}
	return c.repoClient.ReportContributions(ctx, req, o...)
}

// Reporter mode counts reports, not RPC attempts: a report whose first
// batch failed and whose retry got through is sent once and is no error;
// the failed attempt is counted apart. It once showed 100 errors and 200
// reports sent for 100 reports all delivered.
func TestReporterModeCountsEachReportOnce(t *testing.T) {
	b := inProcessBench(t, config{Concurrency: 1, Reports: 100, Keys: 8, Batch: 50,
		ReporterConcurrency: 1, ReporterLinger: 5 * time.Millisecond, Window: 10 * time.Millisecond, Settle: 50 * time.Millisecond})
	b.cli = flakyClient{b.cli.(repoClient), new(atomic.Int64)}
	res, err := b.run("reporter", b.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Acked != 100 || res.Sent != 100 || res.Errors != 0 {
		t.Fatalf("100 reports, all delivered: sent %d, acked %d, errors %d; want 100, 100, 0 (notes %q)",
			res.Sent, res.Acked, res.Errors, res.Notes)
	}
	if res.FailedAttempts == 0 || res.FailedAttempts%50 != 0 {
		t.Fatalf("failed attempt reports %d, want whole failed batches of 50", res.FailedAttempts)
	}
}

// lateClient fails every ReportContributions, and returns only a while
// after its ctx ends: an RPC that outlives the Close that gave up on it.
type lateClient struct {
	repoClient
	returned chan struct{}
}

func (c lateClient) ReportContributions(ctx context.Context, _ *combo.ReportContributionsRequest, _ ...callopt.Option) (*combo.ReportContributionsResponse, error) {
	<-ctx.Done()
	time.Sleep(50 * time.Millisecond)
	defer func() { c.returned <- struct{}{} }()
	return nil, ctx.Err()
}

// A Close that gives up returns without waiting for the sends it
// canceled (client.Reporter.Close): one that returned late recorded its
// attempt into the recorder runReporter had taken and was counting the
// run on, with no lock in common (a data race, under -race), and its
// failed attempt landed in a run already summed.
func TestReporterModeRecordsNothingAfterClose(t *testing.T) {
	defer func(d time.Duration) { reporterCloseTimeout = d }(reporterCloseTimeout)
	reporterCloseTimeout = 200 * time.Millisecond
	cli := lateClient{returned: make(chan struct{}, 1)}
	l, err := runReporter(config{Concurrency: 1, Reports: 1, Keys: 1, Batch: 1,
		ReporterConcurrency: 1, ReporterLinger: time.Millisecond}, cli, newWorkload())
	if err != nil {
		t.Fatal(err)
	}
	failed, sent, errs := l.failedAttempts, l.rec.sent, l.rec.errors
	select {
	case <-cli.returned:
	case <-time.After(5 * time.Second):
		t.Fatal("the send canceled by Close never returned")
	}
	time.Sleep(50 * time.Millisecond) // its recording, if any
	if l.rec.calls != 0 || len(l.rec.latencies) != 0 {
		t.Errorf("the run's recorder took %d attempts after Close had returned", l.rec.calls)
	}
	if failed != 0 || sent != 1 || errs != 1 {
		t.Errorf("failed attempts %d, sent %d, errors %d; want 0, 1, 1 (the report dropped by Close)", failed, sent, errs)
	}
}
