package repo

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/push"
)

//go:embed report.lua
var reportLua string

var reportScript = redis.NewScript(reportLua)

// ReportOutcome is what one report did.
type ReportOutcome int

const (
	Joined    ReportOutcome = iota // counted into the open window
	Duplicate                      // id already counted; nothing changed
	Opened                         // opened (and enqueued) a new window
	Degraded                       // script failed; published on its own
)

// ReportResult answers one contribution.
type ReportResult struct {
	Outcome        ReportOutcome
	WindowID       int64
	WindowQuantity int32
}

// Report counts validated contributions, one script each. Results are in
// input order. Concurrent calls share pipelines (see coalesce.go), so under
// load many reports cost one round trip. When a script fails but Redis
// answers, that contribution is published on its own at once (Degraded).
// When Redis does not answer, the error wraps ErrUnavailable and nothing is
// reported as counted.
func (r *Repo) Report(ctx context.Context, cs []*combo.Contribution) ([]ReportResult, error) {
	return r.reports.do(ctx, cs)
}

// execute runs one pipeline of report scripts for cs. The error is set only
// when Redis did not answer the pipeline.
func (r *Repo) execute(ctx context.Context, cs []*combo.Contribution) ([]*redis.Cmd, error) {
	cmds, err := r.runReports(ctx, cs)
	if err != nil {
		return nil, wrap("repo.Report", err)
	}
	// A script cache flushed under us (restart without AOF of the cache,
	// failover): load it and run those reports again. Replays are safe: a
	// report that did run is a duplicate the second time.
	var retry []int
	for i, cmd := range cmds {
		if cmd.Err() != nil && redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
			retry = append(retry, i)
		}
	}
	if len(retry) > 0 {
		if err := r.LoadScripts(ctx); err != nil {
			return nil, err
		}
		sub := make([]*combo.Contribution, len(retry))
		for j, i := range retry {
			sub[j] = cs[i]
		}
		again, err := r.runReports(ctx, sub)
		if err != nil {
			return nil, wrap("repo.Report", err)
		}
		for j, i := range retry {
			cmds[i] = again[j]
		}
	}
	return cmds, nil
}

// results turns one call's script replies into its answers, publishing
// degraded contributions on their own.
func (r *Repo) results(ctx context.Context, cs []*combo.Contribution, cmds []*redis.Cmd) ([]ReportResult, error) {
	out := make([]ReportResult, len(cs))
	for i, cmd := range cmds {
		res, err := parseReport(cmd)
		if err == nil {
			out[i] = res
			continue
		}
		if isUnavailable(err) {
			return nil, wrap("repo.Report", err)
		}
		// The script failed but Redis answered: fall back to the
		// pre-aggregation behaviour for this one contribution.
		if perr := r.publishSingle(ctx, cs[i]); perr != nil {
			return nil, fmt.Errorf("repo.Report: aggregation failed (%v), degraded publish failed: %w", err, perr)
		}
		out[i] = ReportResult{Outcome: Degraded, WindowID: cs[i].Id, WindowQuantity: cs[i].Quantity}
	}
	return out, nil
}

// runReports pipelines one EVALSHA per contribution. Only a transport
// failure of the whole pipeline is returned as an error; script errors stay
// on their commands.
func (r *Repo) runReports(ctx context.Context, cs []*combo.Contribution) ([]*redis.Cmd, error) {
	pipe := r.rdb.Pipeline()
	cmds := make([]*redis.Cmd, len(cs))
	for i, c := range cs {
		frag, err := push.Fragment(c)
		if err != nil {
			return nil, fmt.Errorf("encode contribution %d: %w", c.Id, err)
		}
		shard := r.keys.Shard(c.ActivityId, c.UserId, c.ItemType)
		cmds[i] = reportScript.EvalSha(ctx, pipe,
			[]string{r.keys.Current(shard, c.ActivityId, c.UserId, c.ItemType), r.keys.Stream(shard)},
			strconv.FormatInt(c.Id, 10), strconv.FormatInt(c.CreatedAt, 10), strconv.Itoa(int(c.Quantity)),
			frag, r.windowMs, r.bucketMs, r.ttlMs, r.keys.ParkedPrefix(shard), r.keys.SeenPrefix(shard), r.maxLen,
			strconv.FormatInt(c.ActivityId, 10), strconv.FormatInt(c.UserId, 10), c.ItemType,
		)
	}
	_, err := pipe.Exec(ctx)
	if err != nil && isUnavailable(err) {
		return nil, err
	}
	return cmds, nil
}

func parseReport(cmd *redis.Cmd) (ReportResult, error) {
	vals, err := cmd.Slice()
	if err != nil {
		return ReportResult{}, err
	}
	if len(vals) != 3 {
		return ReportResult{}, fmt.Errorf("report script: want 3 values, got %d", len(vals))
	}
	status, _ := vals[0].(int64)
	idStr, _ := vals[1].(string)
	qty, _ := vals[2].(int64)
	id, err := strconv.ParseInt(idStr, 10, 64)
	if err != nil {
		return ReportResult{}, fmt.Errorf("report script: window id %q: %w", idStr, err)
	}
	res := ReportResult{WindowID: id, WindowQuantity: int32(qty)}
	switch status {
	case 0:
		res.Outcome = Joined
	case 1:
		res.Outcome = Duplicate
	case 2:
		res.Outcome = Opened
	default:
		return ReportResult{}, fmt.Errorf("report script: unknown status %d", status)
	}
	return res, nil
}

func (r *Repo) publishSingle(ctx context.Context, c *combo.Contribution) error {
	payload, err := push.Single(c)
	if err != nil {
		return err
	}
	return wrap("repo.publishSingle", r.rdb.Publish(ctx, push.Channel(c.ActivityId), payload).Err())
}
