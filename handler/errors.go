package handler

import (
	"context"
	"errors"
	"runtime/debug"

	"github.com/cloudwego/kitex/pkg/rpcinfo"
	"go.uber.org/zap"

	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/metrics"
	"github.com/combo-service/combo-service/repo"
	"github.com/combo-service/combo-service/validate"
)

// ComboError codes (CONTRACT.md §1).
const (
	CodeInvalidArgument int32 = 1
	CodeUnavailable     int32 = 2
	CodeInternal        int32 = 3
)

// errPanicked answers a call whose handler method panicked: the caller
// reads no panic text, the log has it (recoverPanic).
var errPanicked = errors.New("internal error: the RPC handler panicked")

// recoverPanic, deferred by each RPC method on entry, recovers a panic in
// it (validation, a store's outside the repo's pipeline, which recovers
// its own, MergeLatest's merge, building the answer) as the repo does a
// report pipeline's: counted in combo_loop_panics_total{loop="rpc_handler"},
// logged once with its stack, and answered INTERNAL through fail, which
// counts the call's *uncounted reports internal (nil: a call counting no
// reports). A method zeroes *uncounted just before it counts its reports
// by their outcome: Redis took those, and they are pushed. Left to Kitex,
// the panic reached no combo_* metric, so no alert fired, and the caller
// got Kitex's generic error, not the IDL's ComboError.
// The line names the call's reports as fail's other lines do (req, read
// only after a panic: naming them up front would cost every call).
func (h *Handler) recoverPanic(ctx context.Context, rpc string, req any, uncounted *int, err *error) {
	p := recover()
	if p == nil {
		return
	}
	h.metrics.LoopPanics.WithLabelValues(metrics.LoopRPCHandler).Inc()
	n := 0
	if uncounted != nil {
		n = *uncounted
	}
	fields := append(requestFields(req), zap.Any("panic", p), zap.ByteString("stack", debug.Stack()))
	*err = h.fail(ctx, rpc, errPanicked, n, fields...)
}

// requestFields name a call's reports in its panic's line: a report's
// activity, user and id, a batch's size and first report, a MergeLatest's
// activity. A request the panic left unreadable names none.
func requestFields(req any) (fields []zap.Field) {
	defer func() {
		if recover() != nil {
			fields = nil
		}
	}()
	switch r := req.(type) {
	case *combo.ReportContributionRequest:
		return contributionFields(r.Contribution)
	case *combo.ReportContributionsRequest:
		return batchFields(r.Contributions)
	case *combo.MergeLatestRequest:
		if r != nil {
			return []zap.Field{zap.Int64("activity", r.ActivityId)}
		}
	}
	return nil
}

// fail maps any error to the ComboError the caller receives, counts it
// against n reports and logs what the caller cannot fix. It is the only
// place errors become ComboError: Kitex delivers a *combo.ComboError as the
// IDL's declared exception, a typed error on every client. Its lines name
// the method (rpc) and, where Kitex knows it, the caller's address (peer):
// a line naming only the refused field did not say which caller regressed,
// nor whether a report or a MergeLatest was refused.
func (h *Handler) fail(ctx context.Context, rpc string, err error, n int, fields ...zap.Field) *combo.ComboError {
	fields = append([]zap.Field{zap.String("rpc", rpc)}, fields...)
	if peer := peerOf(ctx); peer != "" {
		fields = append(fields, zap.String("peer", peer))
	}
	var invalid *validate.Error
	var code int32
	var outcome string
	switch {
	case errors.As(err, &invalid):
		code, outcome = CodeInvalidArgument, metrics.OutcomeInvalid
		// The caller's mistake, but a caller that regressed has every
		// report refused: the operator needs the field named too (the
		// logger is sampled, so a flood writes about a line a second).
		h.log.Info("request refused: invalid argument", append(fields, zap.Error(err))...)
	case errors.Is(err, ErrDraining):
		// Not Redis's fault either. Mostly a client without TTHeader gets
		// it: client.NewClient drops a connection on the stopping
		// server's mark, which only an answer begun before the stop
		// lacks. Either way the call should go elsewhere.
		code, outcome = CodeUnavailable, metrics.OutcomeDraining
	case errors.Is(err, repo.ErrCallerGone), errors.Is(err, context.Canceled):
		// Nobody reads this answer; Redis may be fine, so no warning (an
		// "unavailable" count would fire the Redis alert). The repo wraps
		// a caller's end as ErrCallerGone; a bare Canceled, were a store to
		// pass the caller's context on, is the same and no internal error.
		code, outcome = CodeUnavailable, metrics.OutcomeCanceled
		h.log.Debug("report abandoned by its caller", append(fields, zap.Error(err))...)
	case errors.Is(err, errPanicked):
		code, outcome = CodeInternal, metrics.OutcomeInternal
		h.log.Error("recovered panic in an RPC handler; the call fails INTERNAL", fields...)
	case errors.Is(err, repo.ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
		code, outcome = CodeUnavailable, metrics.OutcomeUnavailable
		h.log.Warn("report refused: redis unavailable", append(fields, zap.Error(err))...)
	default:
		code, outcome = CodeInternal, metrics.OutcomeInternal
		h.log.Error("report failed", append(fields, zap.Error(err))...)
	}
	// The answer's message and the windows opened are read before the
	// count: a panic reading them (an error whose Error panics) is
	// recovered by recoverPanic, which counts the call's reports internal,
	// so a count made before it would count them twice.
	ce := &combo.ComboError{Code: code, Message: err.Error()}
	// A failed batch may have opened windows all the same (its degraded
	// publish failed, its other reports aggregated): they will be pushed.
	opened := repo.WindowsOpened(err)
	if n > 0 {
		h.metrics.Reports.WithLabelValues(outcome).Add(float64(n))
	}
	if opened > 0 {
		h.metrics.WindowsOpened.Add(float64(opened))
	}
	return ce
}

// peerOf is the address of the caller of the RPC ctx serves, or "" when
// Kitex gave none (a test's context). An rpcinfo Kitex froze
// (rpcinfo.FreezeRPCInfo) from one without a caller answers From() with a
// wrapper of no endpoint, whose Address() panics: peerOf is called on the
// failure path, in recoverPanic too, where a panic would leave the call
// uncounted and unlogged.
func peerOf(ctx context.Context) (peer string) {
	defer func() {
		if recover() != nil {
			peer = ""
		}
	}()
	ri := rpcinfo.GetRPCInfo(ctx)
	if ri == nil || ri.From() == nil || ri.From().Address() == nil {
		return ""
	}
	return ri.From().Address().String()
}
