package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	kclient "github.com/cloudwego/kitex/client"
	"github.com/cloudwego/kitex/client/callopt"
	"github.com/cloudwego/kitex/pkg/connpool"

	"github.com/combo-service/combo-service/client"
	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/kitex_gen/combo/comboservice"
)

// newRPCClient is client.NewClient with a connection pool sized for the
// bench's concurrency: Kitex's default keeps 10 idle connections per
// address, so 32 callers would close and redial connections on every call
// and the bench would measure TCP handshakes instead of the service.
func newRPCClient(addr string, concurrency int) (comboservice.Client, error) {
	return client.NewClient([]string{addr}, kclient.WithLongConnection(connpool.IdleConfig{
		MaxIdlePerAddress: concurrency + 8,
		MaxIdleGlobal:     concurrency + 8,
		MaxIdleTimeout:    time.Minute,
	}))
}

// load is one run's result before the pushes are checked.
type load struct {
	rec     *recorder
	start   time.Time
	end     time.Time     // last answer
	elapsed time.Duration // end - start
	// sendDelay (rate mode): how late each report left against its
	// schedule; large values mean the bench, not the service, fell behind.
	sendDelay *durStats
	notes     []string
	// failedAttempts (reporter mode): reports in RPC attempts that failed,
	// whether the Reporter then delivered them or dropped them.
	failedAttempts int64
}

// closedLoop runs c callers, each sending its next request as soon as its
// last is answered, until d has passed or the -n budget is spent. caller g
// gets a fresh recorder and the keys g, g+c, g+2c, ... of the run, so ids
// rise within every combo key.
func closedLoop(cfg config, wl *workload, call func(g int, keys []comboKey, rec *recorder, more func(k int) int)) load {
	b := newBudget(cfg.Reports)
	var deadline time.Time
	if cfg.Duration > 0 {
		deadline = time.Now().Add(cfg.Duration)
	}
	more := func(k int) int {
		if !deadline.IsZero() && time.Now().After(deadline) {
			return 0
		}
		return b.take(k)
	}
	recs := make([]*recorder, cfg.Concurrency)
	var wg sync.WaitGroup
	start := time.Now()
	for g := range recs {
		recs[g] = newRecorder()
		var keys []comboKey
		for k := g; k < cfg.Keys; k += cfg.Concurrency {
			keys = append(keys, wl.key(int64(k)))
		}
		wg.Go(func() { call(g, keys, recs[g], more) })
	}
	wg.Wait()
	end := time.Now()
	return load{rec: mergeAll(recs), start: start, end: end, elapsed: end.Sub(start)}
}

// runSingle: one ReportContribution per report.
func runSingle(cfg config, cli comboservice.Client, wl *workload) load {
	return closedLoop(cfg, wl, func(_ int, keys []comboKey, rec *recorder, more func(int) int) {
		for i := 0; more(1) == 1; i++ {
			sendOne(cli, wl.contribution(keys[i%len(keys)]), rec)
		}
	})
}

// runBatch: ReportContributions of -b reports per call.
func runBatch(cfg config, cli comboservice.Client, wl *workload) load {
	return closedLoop(cfg, wl, func(_ int, keys []comboKey, rec *recorder, more func(int) int) {
		next := 0
		for {
			n := more(cfg.Batch)
			if n == 0 {
				return
			}
			cs := make([]*combo.Contribution, n)
			for i := range cs {
				cs[i] = wl.contribution(keys[next%len(keys)])
				next++
			}
			sendBatch(cli, cs, rec)
		}
	})
}

// sendOne sends one ReportContribution and records it.
func sendOne(cli comboservice.Client, c *combo.Contribution, rec *recorder) {
	sendOneFrom(cli, c, rec, time.Time{})
}

// sendOneFrom is sendOne whose latency counts from since, when the report
// was due to go (zero: when it went). Its window still starts when it went.
func sendOneFrom(cli comboservice.Client, c *combo.Contribution, rec *recorder, since time.Time) {
	start := time.Now()
	if since.IsZero() || since.After(start) {
		since = start
	}
	resp, err := cli.ReportContribution(context.Background(), &combo.ReportContributionRequest{Contribution: c})
	took := time.Since(since)
	var results []*combo.ReportContributionResponse
	if err == nil && resp != nil {
		results = []*combo.ReportContributionResponse{resp}
	}
	rec.observe(start, took, []*combo.Contribution{c}, results, err)
}

// sendBatch sends one ReportContributions and records it.
func sendBatch(cli client.BatchSender, cs []*combo.Contribution, rec *recorder) {
	start := time.Now()
	resp, err := cli.ReportContributions(context.Background(), &combo.ReportContributionsRequest{Contributions: cs})
	took := time.Since(start)
	var results []*combo.ReportContributionResponse
	if err == nil && resp != nil {
		results = resp.Results
	}
	rec.observe(start, took, cs, results, err)
}

// timedSender sits between the Reporter and the RPC client and records
// every batch it sends; the Reporter runs several sends at once, hence the
// lock (taken once per batch, not per report).
type timedSender struct {
	cli comboservice.Client
	mu  sync.Mutex
	rec *recorder
}

func (s *timedSender) ReportContributions(ctx context.Context, req *combo.ReportContributionsRequest, opts ...callopt.Option) (*combo.ReportContributionsResponse, error) {
	start := time.Now()
	resp, err := s.cli.ReportContributions(ctx, req, opts...)
	took := time.Since(start)
	var results []*combo.ReportContributionResponse
	if err == nil && resp != nil {
		results = resp.Results
	}
	s.mu.Lock()
	if s.rec != nil { // nil: the run is over (see runReporter)
		s.rec.observe(start, took, req.Contributions, results, err)
	}
	s.mu.Unlock()
	return resp, err
}

// reporterCloseTimeout bounds runReporter's Close: how long the flush
// of what the Reporter still holds may take.
var reporterCloseTimeout = 30 * time.Second

// runReporter: c callers hand reports to one client.Reporter, which batches
// them (-b, -reporter-linger, -reporter-conc). A full queue is backpressure,
// not an error: the caller waits briefly and offers the same report again.
// The run ends when Close has flushed everything.
func runReporter(cfg config, cli comboservice.Client, wl *workload) (load, error) {
	sender := &timedSender{cli: cli, rec: newRecorder()}
	rep, err := client.NewReporter(sender, client.ReporterOptions{
		BatchSize:   cfg.Batch,
		Linger:      cfg.ReporterLinger,
		Concurrency: cfg.ReporterConcurrency,
		QueueSize:   max(10000, 4*cfg.Batch*cfg.ReporterConcurrency),
	})
	if err != nil {
		return load{}, err
	}
	var queueFull, refused atomic.Int64
	l := closedLoop(cfg, wl, func(_ int, keys []comboKey, _ *recorder, more func(int) int) {
		for i := 0; more(1) == 1; i++ {
			c := wl.contribution(keys[i%len(keys)])
			for {
				err := rep.Report(context.Background(), c)
				if errors.Is(err, client.ErrQueueFull) {
					queueFull.Add(1)
					time.Sleep(200 * time.Microsecond)
					continue
				}
				if err != nil {
					refused.Add(1)
				}
				break
			}
		}
	})
	closeCtx, cancel := context.WithTimeout(context.Background(), reporterCloseTimeout)
	defer cancel()
	closeErr := rep.Close(closeCtx)
	l.end = time.Now() // Close's flush belongs to the run
	l.elapsed = l.end.Sub(l.start)
	st := rep.Stats()
	// A Close that gave up does not wait for the sends it canceled: one
	// that returns now must not write into the recorder this run is
	// counted on, which is the run's alone from here.
	sender.mu.Lock()
	l.rec = sender.rec
	sender.rec = nil
	sender.mu.Unlock()
	// The recorder saw RPC attempts, a retried batch's reports once per
	// attempt. The run's reports are the Reporter's: each taken once, and
	// an error only if it never got through.
	l.failedAttempts = l.rec.errors
	l.rec.sent = int64(st.Accepted) + refused.Load()
	l.rec.errors = int64(st.Dropped) + refused.Load()
	l.notes = append(l.notes, fmt.Sprintf("reporter: accepted %d, sent %d, dropped %d, retried %d, queue-full waits %d, refused %d",
		st.Accepted, st.Sent, st.Dropped, st.Retried, queueFull.Load(), refused.Load()))
	if closeErr != nil {
		l.notes = append(l.notes, "reporter Close: "+closeErr.Error())
	}
	return l, nil
}
