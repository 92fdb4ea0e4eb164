// Package handler implements the ComboService RPCs. It stays thin:
// validate, call the store or the window rule, map errors to ComboError in
// one place (errors.go).
package handler

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/metrics"
	"github.com/combo-service/combo-service/repo"
	"github.com/combo-service/combo-service/validate"
	"github.com/combo-service/combo-service/window"
)

// Store counts contributions into their windows.
type Store interface {
	Report(ctx context.Context, cs []*combo.Contribution) ([]repo.ReportResult, error)
}

// Handler serves combo.ComboService.
type Handler struct {
	store   Store
	window  time.Duration
	metrics *metrics.Metrics
	log     *zap.Logger
	gate    gate
}

var _ combo.ComboService = (*Handler)(nil)

// New returns the RPC handler. windowSize is W, used by MergeLatest.
func New(store Store, windowSize time.Duration, m *metrics.Metrics, log *zap.Logger) *Handler {
	return &Handler{store: store, window: windowSize, metrics: m, log: log}
}

// Drain refuses reports from now on (UNAVAILABLE) and waits until none is
// in flight, or ctx ends. The service calls it when it stops, after the RPC
// server's own drain and before the worker's last read of the stream.
func (h *Handler) Drain(ctx context.Context) error { return h.gate.drain(ctx) }

// ReportContribution counts one contribution.
func (h *Handler) ReportContribution(ctx context.Context, req *combo.ReportContributionRequest) (_ *combo.ReportContributionResponse, err error) {
	if req == nil {
		req = &combo.ReportContributionRequest{}
	}
	uncounted := 1
	defer h.recoverPanic(ctx, "ReportContribution", req, &uncounted, &err)
	if !h.gate.enter() {
		return nil, h.fail(ctx, "ReportContribution", ErrDraining, 1)
	}
	defer h.gate.leave()
	if err := validate.Contribution(req.Contribution, "contribution"); err != nil {
		return nil, h.fail(ctx, "ReportContribution", err, 1, contributionFields(req.Contribution)...)
	}
	c := req.Contribution
	cs := []*combo.Contribution{c}
	arrived := time.Now()
	res, err := h.store.Report(ctx, cs)
	if err != nil {
		return nil, h.fail(ctx, "ReportContribution", err, 1, contributionFields(c)...)
	}
	uncounted = 0
	h.count(res)
	h.observeAge(arrived, cs, res)
	h.logReported(cs, res)
	return response(res[0]), nil
}

// ReportContributions counts a batch, validated whole first: one bad item
// refuses the call and nothing is counted.
func (h *Handler) ReportContributions(ctx context.Context, req *combo.ReportContributionsRequest) (_ *combo.ReportContributionsResponse, err error) {
	if req == nil {
		req = &combo.ReportContributionsRequest{}
	}
	uncounted := len(req.Contributions)
	defer h.recoverPanic(ctx, "ReportContributions", req, &uncounted, &err)
	if !h.gate.enter() {
		return nil, h.fail(ctx, "ReportContributions", ErrDraining, len(req.Contributions))
	}
	defer h.gate.leave()
	if err := validate.Contributions(req.Contributions); err != nil {
		return nil, h.fail(ctx, "ReportContributions", err, len(req.Contributions), refusedBatchFields(req.Contributions)...)
	}
	arrived := time.Now()
	res, err := h.store.Report(ctx, req.Contributions)
	if err != nil {
		return nil, h.fail(ctx, "ReportContributions", err, len(req.Contributions), batchFields(req.Contributions)...)
	}
	uncounted = 0
	h.count(res)
	h.observeAge(arrived, req.Contributions, res)
	h.logReported(req.Contributions, res)
	out := &combo.ReportContributionsResponse{Results: make([]*combo.ReportContributionResponse, len(res))}
	for i, r := range res {
		out.Results[i] = response(r)
	}
	return out, nil
}

// MergeLatest merges DB rows by the window rule (the poll path). Pure: it
// touches no Redis. ContributionRecord carries no activity_id, so every
// record is taken as a row of req.activity_id.
//
// A row its report would have been refused for (the DB kept it, the push
// path answered INVALID_ARGUMENT and never counted it) is left out, so both
// paths show the same feed: refusing the call would empty the activity's
// whole poll feed for as long as that row is among its latest, even when
// every row given is such a row (the feed is then empty, as the pushes
// were). Such rows are counted and logged. Only a request every row of
// which has its created_at refused, or its id 0, is refused, naming the
// first (validate.MisreadColumn): that is the caller's own mistake (seconds
// for milliseconds, a column not read), which an empty feed would hide.
func (h *Handler) MergeLatest(ctx context.Context, req *combo.MergeLatestRequest) (_ *combo.MergeLatestResponse, err error) {
	defer h.recoverPanic(ctx, "MergeLatest", req, nil, &err) // it counts no reports
	if err := validate.MergeLatest(req); err != nil {
		var fields []zap.Field
		if req != nil {
			fields = append(fields, zap.Int64("activity", req.ActivityId))
		}
		return nil, h.fail(ctx, "MergeLatest", err, 0, fields...)
	}
	rows := make([]window.Row, 0, len(req.Records))
	var firstBad error
	for i, r := range req.Records {
		if err := validate.Record(req.ActivityId, r, i); err != nil {
			if firstBad == nil {
				firstBad = err
			}
			continue
		}
		rows = append(rows, window.Row{
			ID: r.Id, ActivityID: req.ActivityId, UserID: r.UserId, StarID: r.StarId, ItemID: r.ItemId,
			ItemType: r.ItemType, ItemName: r.ItemName, ItemIcon: r.ItemIcon, Nickname: r.Nickname,
			AvatarURL: r.AvatarUrl, Quantity: r.Quantity, CreatedAt: r.CreatedAt,
		})
	}
	if firstBad != nil {
		if len(rows) == 0 {
			if err := validate.MisreadColumn(req.Records); err != nil {
				return nil, h.fail(ctx, "MergeLatest", err, 0, zap.Int64("activity", req.ActivityId))
			}
		}
		skipped := len(req.Records) - len(rows)
		h.metrics.MergeRowsSkipped.Add(float64(skipped))
		h.log.Warn("MergeLatest: rows a report would be refused for left out", zap.Int64("activity", req.ActivityId),
			zap.Int("skipped", skipped), zap.Int("rows", len(req.Records)), zap.NamedError("first", firstBad))
	}
	merged := window.Merge(rows, h.window)
	if req.Limit > 0 && len(merged) > int(req.Limit) {
		merged = merged[:req.Limit]
	}
	out := &combo.MergeLatestResponse{Records: make([]*combo.ContributionRecord, len(merged))}
	for i, m := range merged {
		out.Records[i] = &combo.ContributionRecord{
			Id: m.ID, UserId: m.UserID, Nickname: m.Nickname, AvatarUrl: m.AvatarURL, StarId: m.StarID,
			ItemId: m.ItemID, ItemType: m.ItemType, ItemName: m.ItemName, ItemIcon: m.ItemIcon,
			Quantity: m.Quantity, ComboCount: m.Quantity, CreatedAt: m.CreatedAt,
		}
	}
	return out, nil
}

// contributionFields name a report in its call's log line: its combo
// key's activity and user, and its id (none for a report left out).
func contributionFields(c *combo.Contribution) []zap.Field {
	if c == nil {
		return nil
	}
	return []zap.Field{zap.Int64("activity", c.ActivityId), zap.Int64("user", c.UserId), zap.Int64("id", c.Id)}
}

// batchFields name a batch in its call's log line: its size, and its
// first report (client.Reporter's batches mix callers; the error names
// the item refused, if one was).
func batchFields(cs []*combo.Contribution) []zap.Field {
	fields := []zap.Field{zap.Int("batch", len(cs))}
	if len(cs) > 0 {
		fields = append(fields, contributionFields(cs[0])...)
	}
	return fields
}

// refusedBatchFields name a batch refused as invalid in its call's log
// line: its size, and the report refused (the error's index), not the
// first, which a batch of client.Reporter's mixing callers may not share
// an activity with. A batch refused for its size (validate.Contributions
// judges that first) names no report: none was the one refused, and
// judging each of a batch past MaxBatch would cost the refusal a walk
// over all of it.
func refusedBatchFields(cs []*combo.Contribution) []zap.Field {
	fields := []zap.Field{zap.Int("batch", len(cs))}
	if len(cs) > validate.MaxBatch {
		return fields
	}
	for _, c := range cs {
		if validate.Contribution(c, "") != nil {
			return append(fields, contributionFields(c)...)
		}
	}
	return fields
}

func response(r repo.ReportResult) *combo.ReportContributionResponse {
	return &combo.ReportContributionResponse{
		WindowId: r.WindowID, WindowQuantity: r.WindowQuantity,
		Duplicate: r.Outcome == repo.Duplicate, Degraded: r.Outcome == repo.Degraded,
	}
}

// observeAge records how late counted reports arrived: a report that
// comes after its window was pushed opens one of its own, so the live feed
// then differs from MergeLatest; this says how often, and how late. Only
// reports counted now: a refused attempt or a duplicate (a retry of one
// counted before) would count one contribution again at each retry.
func (h *Handler) observeAge(arrived time.Time, cs []*combo.Contribution, res []repo.ReportResult) {
	now := arrived.UnixMilli()
	for i, r := range res {
		if r.Outcome != repo.Duplicate {
			h.metrics.ReportAge.Observe(float64(max(now-cs[i].CreatedAt, 0)) / 1000)
		}
	}
}

// logReported writes one debug line per report, single or in a batch:
// client.Reporter sends every report in a batch, so an operator who turns
// debug on to follow an id must see those too. At info there is no line
// per report, whatever the load, and the check costs no allocation.
func (h *Handler) logReported(cs []*combo.Contribution, res []repo.ReportResult) {
	if !h.log.Core().Enabled(zap.DebugLevel) {
		return
	}
	for i, r := range res {
		c := cs[i]
		if ce := h.log.Check(zap.DebugLevel, "reported"); ce != nil {
			ce.Write(zap.Int64("activity", c.ActivityId), zap.Int64("user", c.UserId), zap.Int64("id", c.Id),
				zap.Int64("window", r.WindowID), zap.Int32("window_quantity", r.WindowQuantity))
		}
	}
}

func (h *Handler) count(res []repo.ReportResult) {
	var ok, dup, degraded, opened int
	var cause error // the first degraded report's
	for _, r := range res {
		switch r.Outcome {
		case repo.Duplicate:
			dup++
		case repo.Degraded:
			degraded++
			if cause == nil {
				cause = r.Cause
			}
		case repo.Opened:
			opened++
			ok++
		default:
			ok++
		}
	}
	add := func(outcome string, n int) {
		if n > 0 {
			h.metrics.Reports.WithLabelValues(outcome).Add(float64(n))
		}
	}
	add(metrics.OutcomeOK, ok)
	add(metrics.OutcomeDuplicate, dup)
	add(metrics.OutcomeDegraded, degraded)
	if opened > 0 {
		h.metrics.WindowsOpened.Add(float64(opened))
	}
	if degraded > 0 {
		h.log.Warn("aggregation failed; contributions published on their own", zap.Int("count", degraded), zap.NamedError("cause", cause))
	}
}
