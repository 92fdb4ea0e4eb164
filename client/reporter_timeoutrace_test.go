package client

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cloudwego/kitex/client/callopt"
	"github.com/cloudwego/kitex/pkg/kerrors"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/combo-service/combo-service/kitex_gen/combo"
)

// kitexRacedTimeout fails every attempt with the error Kitex v0.16.3's
// rpcTimeoutMW returns when its own timeout fires while the call's
// endpoint is returning (its timeout task's ctx is then canceled, not past
// its deadline): the Reporter's ctx was never canceled. Captured from
// client.NewClient against a SIGSTOPped service with 20 Reporters: 21 of
// 1,095 timed-out attempts had this form, the others "context deadline
// exceeded", and all 21 were counted canceled.
type kitexRacedTimeout struct{}

func (kitexRacedTimeout) ReportContributions(ctx context.Context, _ *combo.ReportContributionsRequest, _ ...callopt.Option) (*combo.ReportContributionsResponse, error) {
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return nil, kerrors.ErrRPCTimeout.WithCause(fmt.Errorf("timeout=1s, to=combo-service, method=ReportContributions, "+
		"location=kitex.rpcTimeoutMW, remote=127.0.0.1:28801: %w by business", context.Canceled))
}

// "canceled" is documented as an attempt abandoned by a Close that gave
// up. With no Close running, a timed-out attempt is a timeout, whatever
// context error Kitex's own timeout task ended with: an operator reading
// canceled attempts during an outage is told someone's Close gave up.
func TestTimedOutAttemptsWithoutCloseAreNotCanceled(t *testing.T) {
	reg := prometheus.NewRegistry()
	drops := newDropLog()
	r := newTestReporter(t, kitexRacedTimeout{}, ReporterOptions{
		BatchSize: 1, MaxRetries: 2, InitialBackoff: time.Millisecond, OnDrop: drops.onDrop, Registerer: reg,
	})
	mustReport(t, r, 1)
	drops.recv(t)
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, errs := drops.snapshot(); r.Stats().Dropped != 1 || len(errs) != 1 || !errors.Is(errs[0], ErrRetriesExhausted) {
		t.Fatalf("stats %+v, drops %v: want one batch dropped, retries exhausted", r.Stats(), errs)
	}
	wantAttempts(t, reg, map[string]float64{resultTimeout: 3})
}
