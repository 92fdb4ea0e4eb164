package repo

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

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
	// Cause is why the aggregation failed, when Outcome is Degraded (a
	// full stream, Redis refusing writes, ...), for the operator's log.
	Cause error
}

// Report counts validated contributions, one script call per shard for
// up to maxPerScript of them (runReports). Results are in input order. Concurrent calls share pipelines (see coalesce.go), so under
// load many reports cost one round trip. When a script fails but Redis
// answers, that contribution is published on its own at once (Degraded),
// and its id remembered (see publishSingles).
// When Redis does not answer, the error wraps ErrUnavailable and nothing is
// reported as counted, but for the windows the call's answered reports
// opened (WindowsOpened). A shared pipeline Redis answered in part answers
// the calls whose reports were all answered.
//
// A call whose contributions all fall on one shard (any single report)
// shares that shard's pipelines, unless it holds bigCall reports or more,
// which run on their own (coalescer.do); one spanning shards runs on its
// own, one per Redis node it spans (reportSpanning).
func (r *Repo) Report(ctx context.Context, cs []*combo.Contribution) ([]ReportResult, error) {
	if len(cs) == 0 {
		return nil, nil
	}
	shard := r.keys.Shard(cs[0].ActivityId, cs[0].UserId, cs[0].ItemType)
	for _, c := range cs[1:] {
		if r.keys.Shard(c.ActivityId, c.UserId, c.ItemType) != shard {
			return r.reportSpanning(ctx, cs, shard)
		}
	}
	return r.reports[shard].do(ctx, cs)
}

// dedupeSubsets is how many small SETs one dedupe bucket is spread over
// (by id mod dedupeSubsets). Up to 512 ids a set stays in Redis's intset
// encoding, so buckets stay compact up to about 8192*512 ids per bucket
// (70k reports/s with 60 s buckets); past that they still work, in the
// larger hashtable encoding.
const dedupeSubsets = 8192

// maxPerScript bounds one script call: Redis runs scripts one at a time,
// so a call must stay short (about a millisecond) to keep others' latency low.
const maxPerScript = 100

// scriptError is a failure Redis reported for one report inside a script
// that otherwise ran: Redis answered, so it is not ErrUnavailable (it
// implements redis.Error, which marks replies).
type scriptError string

func (e scriptError) Error() string {
	msg := "report script: " + string(e)
	// Redis 7's words for a command inside a script that the ACL user may
	// not run name neither the command nor the key; the readiness probe
	// (writeProbeScript) names both.
	if strings.Contains(string(e), "can't run this command") {
		msg += " (the Redis user may not run a command the report script runs: /readyz names it)"
	}
	return msg
}
func (e scriptError) RedisError() {}

// reportReply is one report's answer from the script.
type reportReply struct {
	status   int64
	windowID string
	quantity int64
	err      error // the script failed for this report while Redis answered
	// clock is the node's clock when its script failed for this report
	// (status 3), the zero reading when the whole call failed (no clock).
	clock redisClock
}

// execute counts cs in one pipeline: one script call per shard and up to
// maxPerScript reports. The error is set only when Redis answered none of
// it; a reply Redis did not answer carries its error.
func (r *Repo) execute(ctx context.Context, cs []*combo.Contribution) ([]reportReply, error) {
	replies := make([]reportReply, len(cs))
	todo := make([]int, len(cs))
	for i := range todo {
		todo[i] = i
	}
	tryAgains := 0
	for attempt := 0; ; attempt++ {
		groups, cmds, err := r.runReports(ctx, cs, todo, attempt > 0)
		if err != nil && attempt > 0 && isUnavailable(err) {
			// The retry of scripts Redis lost got no answer: only those
			// reports fail with it. The replies read before stand, so the
			// windows they opened are still counted (WindowsOpened).
			for _, i := range todo {
				replies[i].err = err
			}
			return replies, nil
		}
		if err != nil {
			return nil, wrapWithin("repo.Report", err, reportTimeout)
		}
		read := time.Now() // the replies' clocks are at most this old
		var retry []int
		tryAgain := false
		for g, cmd := range cmds {
			if err := cmd.Err(); err != nil {
				// A script cache flushed under us (restart, failover): run
				// those reports again with EVAL. NOSCRIPT means none ran.
				if redis.HasErrorPrefix(err, "NOSCRIPT") && attempt == 0 {
					retry = append(retry, groups[g]...)
					continue
				}
				// Their slot moving between masters (see guardResend):
				// sent again a few times, as go-redis would have.
				if isTryAgain(err) && tryAgains < len(tryAgainBackoff) {
					retry = append(retry, groups[g]...)
					tryAgain = true
					continue
				}
				for _, i := range groups[g] {
					replies[i].err = err
				}
				continue
			}
			vals, _ := cmd.Val().([]any)
			if len(vals) != 3*len(groups[g]) {
				for _, i := range groups[g] {
					replies[i].err = scriptError(fmt.Sprintf("want %d values, got %d", 3*len(groups[g]), len(vals)))
				}
				continue
			}
			for k, i := range groups[g] {
				rep := &replies[i]
				rep.status, _ = vals[3*k].(int64)
				rep.windowID, _ = vals[3*k+1].(string)
				rep.quantity, _ = vals[3*k+2].(int64)
				if rep.status == 3 {
					rep.err = scriptError(rep.windowID)
					rep.clock = redisClock{ms: rep.quantity, read: read}
				}
			}
		}
		if len(retry) == 0 {
			return replies, nil
		}
		if tryAgain {
			if err := sleepCtx(ctx, tryAgainBackoff[tryAgains]); err != nil {
				for _, i := range retry {
					replies[i].err = err // results wraps it, as any reply's
				}
				return replies, nil
			}
			tryAgains++
		}
		todo = retry
	}
}

// callAnswer is one call's answer from a shared pipeline.
type callAnswer struct {
	res []ReportResult
	err error
}

// results turns a shared pipeline's replies (for cs, the contributions of
// calls of sizes[k] each, in order) into each call's answer. Contributions
// whose script failed while Redis answered are published on their own, all
// of the pipeline's in one round trip: one per call, one after another,
// would spend the pipeline's one timeout on as many round trips as calls
// while Redis refuses writes, and fail the later ones as unavailable. A
// call fails whole when one of its replies says Redis did not answer, or
// when the publish of one of its own degraded contributions fails (not
// another call's). That publish's first error is returned too (the
// calls' errors are looked at again by coalescer.run, which prefers one
// saying Redis fell silent): it is a round trip of the pipeline's, and
// when Redis did not answer it, the calls queued behind must fail with it
// (coalescer.failQueued), as behind a report pipeline Redis did not answer.
func (r *Repo) results(ctx context.Context, cs []*combo.Contribution, replies []reportReply, sizes []int) ([]callAnswer, error) {
	out := make([]callAnswer, len(sizes))
	var degraded []*combo.Contribution
	var clocks []redisClock // of each degraded contribution's node
	var degradedCalls []int
	// One id twice in a pipeline (repeated in a batch, or a retry queued
	// beside its original) degrades twice when the script forgets it after
	// a failure (a full stream) or cannot write it (Redis refusing writes):
	// it is published once, and the later copies are answered duplicate,
	// as the script answers a repeated id (they were answered degraded,
	// "published on its own", for a push that carried only the first).
	var queued map[int64]int // index in degraded; made only when a pipeline degrades
	type at struct{ call, i int }
	var copies []at // results of later copies of a queued id
	// causes[j]: why call degradedCalls[j]'s first degraded report
	// degraded; its error names that, not another call's in the pipeline.
	var causes []error
	var callDegraded [][]int // callDegraded[j]: indexes in degraded of call degradedCalls[j]'s reports
	off := 0
	for k, n := range sizes {
		res := make([]ReportResult, n)
		var err, cause error
		var mine []*combo.Contribution
		var mineClocks []redisClock
		var mineAt []int // each one's index in res
		// Every reply is read, past one Redis did not answer: in a
		// cluster the others came from live nodes, and the windows they
		// opened are counted (WindowsOpened). A call that fails publishes
		// none of its degraded reports; its caller's retry reports them.
		for i := off; i < off+n; i++ {
			rr, perr := parseReport(replies[i])
			switch {
			case perr == nil:
				res[i-off] = rr
			case isUnavailable(perr):
				if err == nil {
					err = wrapWithin("repo.Report", perr, reportTimeout)
				}
			default:
				// The script failed but Redis answered: fall back to the
				// pre-aggregation behaviour for this contribution.
				mine = append(mine, cs[i])
				mineClocks = append(mineClocks, replies[i].clock)
				mineAt = append(mineAt, i-off)
				if cause == nil {
					cause = perr
				}
				res[i-off] = ReportResult{Outcome: Degraded, WindowID: cs[i].Id, WindowQuantity: cs[i].Quantity, Cause: perr}
			}
		}
		off += n
		if err != nil {
			if o := opened(res); o > 0 {
				err = &partlyUnavailableError{err: err, opened: o}
			}
			out[k].err = err
			continue
		}
		out[k].res = res
		if len(mine) > 0 {
			if queued == nil {
				queued = make(map[int64]int)
			}
			var ds []int
			for j, c := range mine {
				if d, ok := queued[c.Id]; ok {
					copies = append(copies, at{k, mineAt[j]})
					ds = append(ds, d)
					continue
				}
				queued[c.Id] = len(degraded)
				ds = append(ds, len(degraded))
				degraded = append(degraded, c)
				clocks = append(clocks, mineClocks[j])
			}
			degradedCalls = append(degradedCalls, k)
			causes = append(causes, cause)
			callDegraded = append(callDegraded, ds)
		}
	}
	if len(degraded) == 0 {
		return out, nil
	}
	known, errs := r.publishSingles(ctx, degraded, clocks)
	// A call fails when the publish of one of its degraded reports (or of
	// the first copy of one) failed; the others' reports were published.
	var first error
	for j, k := range degradedCalls {
		for _, d := range callDegraded[j] {
			if errs != nil && errs[d] != nil {
				out[k] = callAnswer{err: &degradedPublishError{cause: causes[j], err: errs[d], opened: opened(out[k].res)}}
				if first == nil {
					first = errs[d]
				}
				break
			}
		}
	}
	// Not published now: its id was remembered already (see
	// publishSingles). It is the duplicate a re-sent report script
	// would answer, not a report pushed on its own.
	for _, k := range degradedCalls {
		for i := range out[k].res {
			if rr := &out[k].res[i]; rr.Outcome == Degraded && known[rr.WindowID] {
				*rr = ReportResult{Outcome: Duplicate}
			}
		}
	}
	for _, c := range copies {
		if out[c.call].err == nil {
			out[c.call].res[c.i] = ReportResult{Outcome: Duplicate}
		}
	}
	return out, first
}

// degradedPublishError fails a call whose degraded reports could not be
// published. Its other reports were counted all the same: the windows they
// opened exist and will be pushed (WindowsOpened).
type degradedPublishError struct {
	cause  error // why the aggregation of the call's first degraded report failed
	err    error // why the publish did
	opened int   // windows the call's other reports opened
}

func (e *degradedPublishError) Error() string {
	return fmt.Sprintf("repo.Report: aggregation failed (%v), degraded publish failed: %v", e.cause, e.err)
}

func (e *degradedPublishError) Unwrap() error { return e.err }

// partlyUnavailableError fails a call some of whose reports Redis did not
// answer (in a cluster, their shards' master) while others were counted
// on nodes that did. It is the unavailable error, with how many windows
// those others opened (WindowsOpened).
type partlyUnavailableError struct {
	err    error
	opened int
}

func (e *partlyUnavailableError) Error() string { return e.err.Error() }
func (e *partlyUnavailableError) Unwrap() error { return e.err }

// WindowsOpened is how many windows a Report call that failed with err
// opened all the same, which will be pushed when due: the call's reports
// that aggregated stay counted when its degraded publish fails, or when
// Redis did not answer for others (a batch spanning a dead cluster
// master's shards and live ones). A retry of the call finds them
// duplicates and opens nothing.
func WindowsOpened(err error) int {
	if n, ok := spanningOpened(err); ok { // before the part's own, which it counts
		return n
	}
	var de *degradedPublishError
	if errors.As(err, &de) {
		return de.opened
	}
	var pe *partlyUnavailableError
	if errors.As(err, &pe) {
		return pe.opened
	}
	return 0
}

func opened(res []ReportResult) int {
	n := 0
	for _, rr := range res {
		if rr.Outcome == Opened {
			n++
		}
	}
	return n
}

// runReports pipelines the report scripts for cs[todo...], grouped by
// shard (a script's keys must share a slot) in input order, and returns
// each script call's indices into cs. Only a failure of the whole
// pipeline (pipelineError) is returned as an error, and only when no
// script answered; script errors, and the failure of those that did not
// answer, stay on their commands. With eval it sends the script itself
// (EVAL) rather than its hash, for a node whose script cache was flushed:
// EVAL caches it there again, on that node alone, so a dead node elsewhere
// in a cluster (which makes loading on every node fail) does not matter.
func (r *Repo) runReports(ctx context.Context, cs []*combo.Contribution, todo []int, eval bool) ([][]int, []*redis.Cmd, error) {
	byShard := make(map[int][]int)
	var order []int
	for _, i := range todo {
		c := cs[i]
		shard := r.keys.Shard(c.ActivityId, c.UserId, c.ItemType)
		if _, ok := byShard[shard]; !ok {
			order = append(order, shard)
		}
		byShard[shard] = append(byShard[shard], i)
	}
	pipe := r.rdb.Pipeline()
	var groups [][]int
	var cmds []*redis.Cmd
	for _, shard := range order {
		idx := byShard[shard]
		r.guardResend(ctx, pipe, shard)
		for len(idx) > 0 {
			n := min(len(idx), maxPerScript)
			group := idx[:n]
			idx = idx[n:]
			keys := make([]string, 1, 2+n)
			keys[0] = r.keys.Stream(shard)
			args := make([]any, 0, 5+6*n)
			args = append(args, r.ttlMs, r.keys.ParkedPrefix(shard), r.maxLen, r.keys.SeenPrefix(shard), r.bucketSec)
			for _, i := range group {
				c := cs[i]
				frag, err := push.Fragment(c)
				if err != nil {
					return nil, nil, fmt.Errorf("encode contribution %d: %w", c.Id, err)
				}
				keys = append(keys, r.keys.Current(shard, c.ActivityId, c.UserId, c.ItemType))
				args = append(args, strconv.FormatInt(c.Id, 10), strconv.FormatInt(c.CreatedAt, 10),
					strconv.FormatInt(c.CreatedAt-r.windowMs, 10), strconv.Itoa(int(c.Quantity)), frag,
					strconv.FormatInt(c.Id%dedupeSubsets, 10))
			}
			keys = append(keys, r.keys.Probe(shard)) // see report.lua
			groups = append(groups, group)
			run := reportScript.EvalSha
			if eval {
				run = reportScript.Eval
			}
			cmds = append(cmds, run(ctx, pipe, keys, args...))
		}
	}
	sent, err := pipe.Exec(ctx)
	if err := pipelineError(sent, err); err != nil {
		// TRYAGAIN is one script's reply, on its own command: execute
		// sends those again (see guardResend), whether others answered
		// or not.
		if !isUnavailable(err) || (!anyAnswered(cmds) && !isTryAgain(err)) {
			return nil, nil, err
		}
		// Some scripts answered before Redis stopped answering, or on
		// nodes that answered (a cluster with a master down: go-redis
		// sends each node its part). Those scripts ran, whole; go-redis
		// set the pipeline's error on them all the same. Their replies
		// stand, so the windows they opened are known (WindowsOpened);
		// the others fail with the pipeline's error.
		for _, c := range cmds {
			if c.Val() != nil {
				c.SetErr(nil)
			} else if c.Err() == nil {
				c.SetErr(err)
			}
		}
	}
	return groups, cmds, nil
}

// anyAnswered tells whether Redis answered one of cmds: a script's reply
// is an array, read into the command's value, which go-redis keeps when
// it sets a failed pipeline's error on every command.
func anyAnswered(cmds []*redis.Cmd) bool {
	for _, c := range cmds {
		if c.Val() != nil {
			return true
		}
	}
	return false
}

func parseReport(rep reportReply) (ReportResult, error) {
	if rep.err != nil {
		return ReportResult{}, rep.err
	}
	id, err := strconv.ParseInt(rep.windowID, 10, 64)
	if err != nil {
		return ReportResult{}, fmt.Errorf("report script: window id %q: %w", rep.windowID, err)
	}
	res := ReportResult{WindowID: id, WindowQuantity: int32(rep.quantity)}
	switch rep.status {
	case 0:
		res.Outcome = Joined
	case 1:
		res.Outcome = Duplicate
	case 2:
		res.Outcome = Opened
	default:
		return ReportResult{}, fmt.Errorf("report script: unknown status %d", rep.status)
	}
	return res, nil
}
