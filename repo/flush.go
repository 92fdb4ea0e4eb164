package repo

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/combo-service/combo-service/push"
)

//go:embed flush.lua
var flushLua string

var flushScript = redis.NewScript(flushLua)

// Window is one stream entry: a window waiting to close.
type Window struct {
	Shard      int
	ID         string // stream entry id: the window's identity
	ActivityID int64
	UserID     int64
	ItemType   string
	Due        int64 // Redis ms when it may be published
	// NotAfter, if not 0, is the Redis ms past which a flush of it must
	// not run (Late): by then its sender has stopped waiting for the
	// answer. A flush that waited that long on a paused master's socket
	// would otherwise run when the master resumes, before it hears that
	// its replica was promoted meanwhile, and push again a window the new
	// master had pushed.
	NotAfter int64
}

// flushValues is how many values flush.lua answers with status vals[0]:
// a publish says how many clients it reached too.
func flushValues(vals []int64) int {
	if len(vals) > 0 && vals[0] == 0 {
		return 4
	}
	return 3
}

// FlushStatus is what one flush did.
type FlushStatus int

const (
	Published FlushStatus = iota
	Early                 // not due yet by Redis's clock; try again at Due
	Stale                 // older than window.stale: dropped, never published
	Gone                  // no data: already flushed (e.g. by a claimer)
	// Lost: the entry still waited but its data was gone before it could
	// expire: evicted, deleted or overwritten with another type, never
	// published (told from an expiry however late the flush comes).
	Lost
	Kept // Retire only: not stale yet; nothing changed
	Late // run past Window.NotAfter (Redis's clock then in Now); nothing changed
)

func (s FlushStatus) String() string {
	switch s {
	case Published:
		return "published"
	case Early:
		return "early"
	case Stale:
		return "stale"
	case Gone:
		return "gone"
	case Lost:
		return "lost"
	case Kept:
		return "kept"
	case Late:
		return "late"
	}
	return "unknown"
}

// FlushResult answers one window's flush. Err is set when this window's
// script failed while Redis answered (the entry stays pending).
type FlushResult struct {
	Status   FlushStatus
	Lag      time.Duration // Published: how long past due
	Age      time.Duration // Stale, Lost: how old the window was
	Due, Now int64         // Early (Due, Now), Late (Now): Redis ms
	Quantity int64
	// Heard, for Published, is how many clients the PUBLISH reached
	// (subscribers of the channel or of a pattern matching it), or -1 on a
	// Redis Cluster: there a node counts only its own clients, not those of
	// the other nodes it forwards the message to, so 0 says nothing.
	Heard int64
	Err   error
}

// Flush runs the flush script for each window, pipelined (one round trip
// per batch; a cluster client splits it per node). Windows whose script
// Redis no longer had (NOSCRIPT: restart, failover; the script did not run)
// are run once more with EVAL (see runReports). The error is set only
// when Redis did not answer; then no result can be trusted and every
// window stays pending, so retrying is safe: a window that was in fact
// published answers Gone the second time. That holds for the windows
// answered before a connection was lost part way too: go-redis (v9.23)
// puts the connection's error on every command of the pipeline, its
// answered ones included, so they are counted gone, not published, and
// their push lag is not observed. Telling them apart means reading the
// value go-redis leaves beside that error, which it does not promise; the
// report path does (runReports), with tests that fail if go-redis stops
// leaving it (TestCallAnsweredInPartSaysWhatItOpened). Here only metrics
// would gain, and the worker would have to take a batch answered in part.
func (r *Repo) Flush(ctx context.Context, ws []Window) ([]FlushResult, error) {
	out := make([]FlushResult, len(ws))
	todo := make([]int, len(ws))
	for i := range todo {
		todo[i] = i
	}
	for attempt := 0; ; attempt++ {
		cmds, err := r.runFlushes(ctx, ws, todo, attempt > 0)
		if err != nil {
			return nil, wrap("repo.Flush", err)
		}
		var again []int
		for k, cmd := range cmds {
			i := todo[k]
			if attempt == 0 && cmd.Err() != nil && redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
				again = append(again, i)
				continue
			}
			out[i] = parseFlush(cmd)
			if r.cluster && out[i].Status == Published {
				out[i].Heard = -1 // see FlushResult.Heard
			}
			if out[i].Err != nil && isUnavailable(out[i].Err) {
				return nil, wrap("repo.Flush", out[i].Err)
			}
		}
		if len(again) == 0 {
			return out, nil
		}
		todo = again
	}
}

// runFlushes pipelines the flush script for ws[todo...], with EVAL if eval.
func (r *Repo) runFlushes(ctx context.Context, ws []Window, todo []int, eval bool) ([]*redis.Cmd, error) {
	pipe := r.rdb.Pipeline()
	cmds := make([]*redis.Cmd, len(todo))
	run := flushScript.EvalSha
	if eval {
		run = flushScript.Eval
	}
	for k, i := range todo {
		w := ws[i]
		cmds[k] = run(ctx, pipe, r.flushKeys(w),
			Group, w.ID, push.Channel(w.ActivityID), strconv.FormatInt(w.ActivityID, 10),
			strconv.FormatInt(w.UserID, 10), push.JSONString(w.ItemType), r.delayMs, r.staleMs,
			"", w.NotAfter, // no mode: a flush
			r.expiredMs,
		)
	}
	sent, err := pipe.Exec(ctx)
	if err := pipelineError(sent, err); err != nil {
		return nil, err
	}
	return cmds, nil
}

// Retire retires w without publishing it, if it is done with by Redis's
// clock: older than window.stale (its data deleted, its entry acked and
// deleted: Stale), already published (Gone) or its data lost (Lost), as
// the flush script would. Otherwise nothing changes (Kept). It is the
// flush script in its "retire" mode, without the push's arguments: the
// worker's way out for a window whose flush keeps panicking.
func (r *Repo) Retire(ctx context.Context, w Window) (FlushResult, error) {
	cmd := flushScript.Run(ctx, r.rdb, r.flushKeys(w), Group, w.ID, "", "", "", "", r.delayMs, r.staleMs, "retire", 0, r.expiredMs)
	res := parseFlush(cmd)
	if res.Err != nil {
		return FlushResult{}, wrap("repo.Retire", res.Err)
	}
	return res, nil
}

// ReplyTimeout is how long the Redis client waits for the reply to one
// send before it gives up on it (its read timeout: redis.timeout), 0 when
// only the call's ctx bounds it. A flush's NotAfter must come no later:
// the client, or the worker, may then send it again, perhaps to a newly
// promoted master, while the first send still waits on the old one.
func (r *Repo) ReplyTimeout() time.Duration {
	var d time.Duration
	switch c := r.rdb.(type) {
	case *redis.Client:
		d = c.Options().ReadTimeout
	case *redis.ClusterClient:
		d = c.Options().ReadTimeout
	case *redis.Ring:
		d = c.Options().ReadTimeout
	}
	return max(d, 0) // go-redis's -1: no read deadline at all
}

// flushKeys are the flush script's KEYS for w: its stream, its combo key's
// current window and where w is if a newer one displaced it.
func (r *Repo) flushKeys(w Window) []string {
	return []string{
		r.keys.Stream(w.Shard),
		r.keys.Current(w.Shard, w.ActivityID, w.UserID, w.ItemType),
		r.keys.Parked(w.Shard, w.ID),
	}
}

func parseFlush(cmd *redis.Cmd) FlushResult {
	vals, err := cmd.Int64Slice()
	if err != nil {
		return FlushResult{Err: err}
	}
	if want := flushValues(vals); len(vals) != want {
		return FlushResult{Err: fmt.Errorf("flush script: want %d values, got %d", want, len(vals))}
	}
	switch vals[0] {
	case 0:
		return FlushResult{Status: Published, Lag: time.Duration(vals[1]) * time.Millisecond, Quantity: vals[2], Heard: vals[3]}
	case 1:
		return FlushResult{Status: Early, Due: vals[1], Now: vals[2]}
	case 2:
		return FlushResult{Status: Stale, Age: time.Duration(vals[1]) * time.Millisecond, Quantity: vals[2]}
	case 3:
		return FlushResult{Status: Gone}
	case 4:
		return FlushResult{Status: Lost, Age: time.Duration(vals[1]) * time.Millisecond}
	case 5:
		return FlushResult{Status: Kept, Age: time.Duration(vals[1]) * time.Millisecond}
	case 6:
		return FlushResult{Status: Late, Now: vals[1]}
	}
	return FlushResult{Err: fmt.Errorf("flush script: unknown status %d", vals[0])}
}
