package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/cloudwego/kitex/client/callopt"
	"github.com/cloudwego/kitex/pkg/kerrors"
	"github.com/cloudwego/kitex/pkg/remote"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/combo-service/combo-service/internal/testkitex"
	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/kitex_gen/combo/comboservice"
)

// scriptedService answers each ReportContributions over real Kitex with
// the next step of its script: an error to return, or a delay before
// answering.
type scriptedService struct {
	slowService
	steps    chan scriptStep
	received chan struct{} // if set, told of each call as it takes its step
}

type scriptStep struct {
	err   error
	delay time.Duration
}

func (s *scriptedService) ReportContributions(ctx context.Context, req *combo.ReportContributionsRequest) (*combo.ReportContributionsResponse, error) {
	step := <-s.steps
	if s.received != nil {
		s.received <- struct{}{}
	}
	if step.delay > 0 {
		select {
		case <-time.After(step.delay):
		case <-s.stop:
		}
	}
	if step.err != nil {
		return nil, step.err
	}
	return s.slowService.ReportContributions(ctx, req)
}

// attemptCounts reads combo_reporter_attempts_total by result, and the
// count and sum of combo_reporter_attempt_duration_seconds.
func attemptCounts(t *testing.T, reg *prometheus.Registry) (byResult map[string]float64, n uint64, sum float64) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	byResult = map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch mf.GetName() {
			case metricAttempts:
				byResult[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
			case metricAttemptTime:
				n, sum = m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
			}
		}
	}
	return byResult, n, sum
}

// wantAttempts fails unless exactly the results in want were counted (each
// of the others exported at 0) and the histogram holds one observation per
// attempt. It waits for the counts first: an attempt a Close abandoned is
// counted when its RPC returns, which Close does not wait for.
func wantAttempts(t *testing.T, reg *prometheus.Registry, want map[string]float64) (sum float64) {
	t.Helper()
	var total float64
	for _, v := range want {
		total += v
	}
	got, n, sum := attemptCounts(t, reg)
	counted := func() (c float64) {
		for _, v := range got {
			c += v
		}
		return c
	}
	// Both counts: Gather reads the counter and the histogram one after
	// the other, so an attempt counted between the two reads shows in the
	// histogram but not yet in attempts_total.
	for deadline := time.Now().Add(waitFor); (float64(n) < total || counted() < total) && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
		got, n, sum = attemptCounts(t, reg)
	}
	for _, res := range attemptResults {
		if _, ok := got[res]; !ok {
			t.Errorf("attempts_total has no %q series; every result is exported from the start", res)
		}
		if got[res] != want[res] {
			t.Errorf("attempts_total{result=%q} = %v, want %v", res, got[res], want[res])
		}
	}
	if float64(n) != total {
		t.Errorf("attempt_duration_seconds counts %d attempts, want %v", n, total)
	}
	return sum
}

// Each ReportContributions attempt is counted by why it failed, as Kitex
// really delivers the failure, and timed: the caller can tell a service
// refusing from one slow or unreachable while the retries ride it out.
func TestAttemptsCountedByResultOverKitex(t *testing.T) {
	const rpcTimeout = 300 * time.Millisecond
	svc := &scriptedService{slowService: slowService{stop: make(chan struct{})}, steps: make(chan scriptStep, 8)}
	cli := kitexClientOf(t, svc)
	t.Cleanup(func() { close(svc.stop) }) // runs before the server stops
	reg := prometheus.NewRegistry()
	drops := newDropLog()
	r := newTestReporter(t, cli, ReporterOptions{
		BatchSize: 1, Concurrency: 1, MaxRetries: 5, InitialBackoff: time.Millisecond, RPCTimeout: rpcTimeout,
		OnDrop: drops.onDrop, Registerer: reg,
	})
	for _, s := range []scriptStep{
		{err: &combo.ComboError{Code: CodeUnavailable, Message: "redis: connection refused"}},
		{err: &combo.ComboError{Code: CodeInternal, Message: "boom"}},
		{delay: 3 * rpcTimeout}, // no answer within RPCTimeout
		{},                      // sent
		{err: &combo.ComboError{Code: CodeInvalidArgument, Message: "activity_id: must be positive"}},
	} {
		svc.steps <- s
	}
	mustReport(t, r, 1)
	mustReport(t, r, 2) // sent once 1 is (Concurrency 1), and refused
	drops.recv(t)
	closeWithin(t, r)
	sum := wantAttempts(t, reg, map[string]float64{
		resultUnavailable: 1, resultInternal: 1, resultTimeout: 1, resultOK: 1, resultInvalidArgument: 1,
	})
	if sum < rpcTimeout.Seconds() {
		t.Errorf("attempt durations sum to %.3fs, less than the timed-out attempt's %v", sum, rpcTimeout)
	}

	// No replica listening: the dial fails.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	cli, err = NewClient([]string{closed})
	if err != nil {
		t.Fatal(err)
	}
	reg = prometheus.NewRegistry()
	r = newTestReporter(t, cli, ReporterOptions{BatchSize: 1, MaxRetries: -1, OnDrop: drops.onDrop, Registerer: reg})
	mustReport(t, r, 3)
	drops.recv(t)
	closeWithin(t, r)
	wantAttempts(t, reg, map[string]float64{resultConnection: 1})
}

// Failures of the Reporter's own making are told apart too: a sender that
// panics (counted after the recover), a reply without one result per
// contribution, an attempt a Close abandoned, anything else.
func TestAttemptsCountedByResultOfTheReportersOwnChecks(t *testing.T) {
	errOdd := errors.New("something else")
	f := newFake(func(ctx context.Context, attempt int, items []*combo.Contribution) error {
		switch attempt {
		case 1:
			panic("sender bug")
		case 2:
			return errOdd
		case 3:
			<-ctx.Done() // until the Close below gives up
			return ctx.Err()
		}
		return nil
	})
	reg := prometheus.NewRegistry()
	drops := newDropLog()
	r := newTestReporter(t, f, ReporterOptions{BatchSize: 1, MaxRetries: 5, InitialBackoff: time.Millisecond,
		RPCTimeout: time.Hour, OnDrop: drops.onDrop, Registerer: reg})
	mustReport(t, r, 1)
	f.recv(t)
	f.recv(t)
	f.recv(t) // attempt 3, held
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := r.Close(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Close = %v, want context.Canceled", err)
	}
	drops.recv(t)
	wantAttempts(t, reg, map[string]float64{resultSenderPanicked: 1, resultOther: 1, resultCanceled: 1})

	reg = prometheus.NewRegistry()
	short := &shortSender{}
	r = newTestReporter(t, short, ReporterOptions{BatchSize: 1, MaxRetries: -1, OnDrop: drops.onDrop, Registerer: reg})
	mustReport(t, r, 2)
	drops.recv(t)
	closeWithin(t, r)
	wantAttempts(t, reg, map[string]float64{resultBadResponse: 1})
}

// Kitex's failures and the service's codes map to the results their
// names promise, wrapped or not.
func TestAttemptResult(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{nil, resultOK},
		{&combo.ComboError{Code: CodeInvalidArgument}, resultInvalidArgument},
		{fmt.Errorf("wrapped: %w", &combo.ComboError{Code: CodeUnavailable}), resultUnavailable},
		{&combo.ComboError{Code: CodeInternal}, resultInternal},
		{&combo.ComboError{Code: 42}, resultOther},
		{kerrors.ErrRPCTimeout.WithCause(errors.New("timeout=1s")), resultTimeout},
		{kerrors.ErrTimeoutByBusiness.WithCause(errors.New("deadline")), resultTimeout},
		{context.DeadlineExceeded, resultTimeout},
		{kerrors.ErrCanceledByBusiness.WithCause(errors.New("canceled")), resultCanceled},
		{kerrors.ErrRPCTimeout.WithCause(context.Canceled), resultCanceled}, // as Kitex reports an abandoned call
		{kerrors.ErrRemoteOrNetwork.WithCause(remote.NewTransErrorWithMsg(remote.InternalError, "panic")), resultInternal},
		{context.Canceled, resultCanceled},
		{kerrors.ErrGetConnection.WithCause(errors.New("dial tcp: refused")), resultConnection},
		{kerrors.ErrRemoteOrNetwork.WithCause(errors.New("connection reset by peer")), resultConnection},
		{kerrors.ErrNoInstance, resultConnection},
		{kerrors.ErrNoMoreInstance, resultConnection},
		{kerrors.ErrLoadbalance.WithCause(errors.New("no instance")), resultConnection},
		{fmt.Errorf("%w: 0 results for 1 contributions", ErrBadResponse), resultBadResponse},
		{fmt.Errorf("%w: oops", ErrSenderPanicked), resultSenderPanicked},
		{errors.New("else"), resultOther},
	} {
		if got := attemptResult(tc.err, true); got != tc.want {
			t.Errorf("attemptResult(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
	// Not aborted (the Reporter's context was not canceled): Kitex's own
	// timeout firing as the call returns, or a BatchSender's own
	// cancellation. Only the results of canceled errors change.
	for _, tc := range []struct {
		err  error
		want string
	}{
		{kerrors.ErrRPCTimeout.WithCause(context.Canceled), resultTimeout},
		{kerrors.ErrCanceledByBusiness.WithCause(errors.New("canceled")), resultOther},
		{context.Canceled, resultOther},
		{kerrors.ErrRPCTimeout.WithCause(errors.New("timeout=1s")), resultTimeout},
		{kerrors.ErrGetConnection.WithCause(errors.New("dial tcp: refused")), resultConnection},
	} {
		if got := attemptResult(tc.err, false); got != tc.want {
			t.Errorf("attemptResult(%v), not aborted = %q, want %q", tc.err, got, tc.want)
		}
	}
}

// shortSender answers with no results at all.
type shortSender struct{}

func (shortSender) ReportContributions(context.Context, *combo.ReportContributionsRequest, ...callopt.Option) (*combo.ReportContributionsResponse, error) {
	return &combo.ReportContributionsResponse{}, nil
}

// panickingService's handler panics; Kitex recovers it and answers an
// application exception.
type panickingService struct{ slowService }

func (panickingService) ReportContributions(context.Context, *combo.ReportContributionsRequest) (*combo.ReportContributionsResponse, error) {
	panic("handler bug")
}

// A replica that answers with an exception Kitex raised in its handler's
// place was reached, and failed: internal, not connection (Kitex wraps the
// exception in its "remote or network" error).
func TestAttemptAnsweredWithAnExceptionIsInternal(t *testing.T) {
	cli := kitexClientOf(t, &panickingService{slowService{stop: make(chan struct{})}})
	reg := prometheus.NewRegistry()
	drops := newDropLog()
	r := newTestReporter(t, cli, ReporterOptions{BatchSize: 1, MaxRetries: -1, OnDrop: drops.onDrop, Registerer: reg})
	mustReport(t, r, 1)
	drops.recv(t)
	closeWithin(t, r)
	wantAttempts(t, reg, map[string]float64{resultInternal: 1})
}

// An attempt over real Kitex that a Close which gave up abandoned is
// canceled, not timeout: Kitex reports it as an RPC timeout caused by
// context.Canceled.
func TestAttemptAbandonedByCloseOverKitexIsCanceled(t *testing.T) {
	svc := &scriptedService{slowService: slowService{stop: make(chan struct{})}, steps: make(chan scriptStep, 1),
		received: make(chan struct{}, 1)}
	cli := kitexClientOf(t, svc)
	t.Cleanup(func() { close(svc.stop) }) // runs before the server stops
	reg := prometheus.NewRegistry()
	drops := newDropLog()
	r := newTestReporter(t, cli, ReporterOptions{BatchSize: 1, RPCTimeout: time.Hour, OnDrop: drops.onDrop, Registerer: reg})
	svc.steps <- scriptStep{delay: time.Hour}
	mustReport(t, r, 1)
	select {
	case <-svc.received:
	case <-time.After(waitFor):
		t.Fatal("the service got no call")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := r.Close(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Close = %v, want context.Canceled", err)
	}
	drops.recv(t)
	wantAttempts(t, reg, map[string]float64{resultCanceled: 1})
}

// A Reporter that replaces a closed one on the same Registerer counts its
// attempts on in the closed one's series, as the other counters do.
func TestAttemptMetricsCountOnAcrossClose(t *testing.T) {
	reg := prometheus.NewRegistry()
	for id := range int64(2) {
		r := newTestReporter(t, newFake(nil), ReporterOptions{Registerer: reg, BatchSize: 1})
		mustReport(t, r, id+1)
		closeWithin(t, r)
	}
	wantAttempts(t, reg, map[string]float64{resultOK: 2})
}

// kitexClientOf serves svc over real Kitex until the test ends and returns
// a NewClient of it.
func kitexClientOf(t *testing.T, svc combo.ComboService) comboservice.Client {
	t.Helper()
	cli, err := NewClient([]string{testkitex.Serve(t, svc)})
	if err != nil {
		t.Fatal(err)
	}
	return cli
}
