package repo

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/push"
)

//go:embed degrade.lua
var degradeLua string

var degradeScript = redis.NewScript(degradeLua)

// publishSingles publishes each contribution as a record of its own
// (degraded) and remembers its id, so that a retry of it answers duplicate:
// before, the report script had forgotten it and a retry whose answer had
// been lost was published a second time, on its own again or in a window.
// degrade.lua publishes an id at most once, also when go-redis sends its
// call again, unless Redis refuses writes (then it cannot remember it).
//
// All go in one pipeline, one script call each: one round trip however
// many a pipeline degrades, so a batch is not left half published when its
// time runs out. Each call names its shard's stream and probe keys, which
// on a Redis Cluster send it to the master of the report's shard, and keep
// it off the shard while its slot moves (TRYAGAIN: UNAVAILABLE, as for the
// report script). (A bare PUBLISH names no key; go-redis sent it to any
// master in turn, so a master that did not answer failed the degraded
// reports of live shards too, after redis.timeout.)
//
// It returns the ids the dedupe sets already held, which it did not
// publish: published by this same call, sent again by go-redis after its
// answer was lost, or counted meanwhile by another copy into a window,
// which pushes it. Either way the report is a duplicate now.
//
// And it returns, when any failed, why each of cs was not published
// (errs[i], nil for one published or known): a reply that fails one
// report (its channel denied to the Redis user, a call run past its
// deadline) fails that report alone, so only the calls it belongs to
// fail; Redis not answering fails every report it did not answer before
// it fell silent. Before, the first failure failed every call of the
// pipeline, also those whose reports had been published: their callers
// were told INTERNAL for another caller's denied channel, and where Redis
// could not remember the ids (refusing writes), their retries were
// published again. A report whose call did publish is remembered (unless
// Redis refuses writes) and answers duplicate when its caller sends it
// again; the others are published then.
//
// Each call carries a deadline on its node's clock (degrade.lua's ARGV[7]),
// estimated from clocks[i], the clock report.lua answered with when it
// failed for cs[i]: that reading, plus the time since it was read, plus
// how long the sender waits for this send's answer (the ctx's deadline or
// the client's read timeout, the earlier). Past it the sender no longer
// waits: it answers UNAVAILABLE and its caller may send the report again,
// to a replica promoted meanwhile. A call that runs later, say on a
// paused master when it resumes, answers late, changes nothing, and fails
// its report UNAVAILABLE. The reading is no later than the node's clock
// when it was read here, so the deadline errs early, by the script's run
// and the answer's trip at most. A zero reading (the whole report call
// failed, with no clock) or a client that waits with no bound sets none.
func (r *Repo) publishSingles(ctx context.Context, cs []*combo.Contribution, clocks []redisClock) (known map[int64]bool, errs []error) {
	failAll := func(err error) []error {
		if errs == nil {
			errs = make([]error, len(cs))
		}
		for i := range errs {
			if errs[i] == nil {
				errs[i] = err
			}
		}
		return errs
	}
	fail := func(i int, err error) {
		if errs == nil {
			errs = make([]error, len(cs))
		}
		errs[i] = err
	}
	todo := make([]int, len(cs)) // indexes into cs still to send
	for i := range todo {
		todo[i] = i
	}
	for attempt := 0; ; attempt++ {
		pipe := r.rdb.Pipeline()
		cmds := make([]*redis.Cmd, len(todo))
		wait, bounded := r.replyWait(ctx)
		var guarded map[int]bool // shards given a guardResend, on a Cluster
		var guards []*redis.IntCmd
		if r.cluster {
			guarded = map[int]bool{}
		}
		for j, i := range todo {
			c := cs[i]
			payload, err := push.Single(c)
			if err != nil {
				return known, failAll(fmt.Errorf("repo.publishSingles: %w", err))
			}
			shard := r.keys.Shard(c.ActivityId, c.UserId, c.ItemType)
			if guarded != nil && !guarded[shard] { // a published report re-run would answer known
				guarded[shard] = true
				guards = append(guards, r.guardResend(ctx, pipe, shard))
			}
			run := degradeScript.EvalSha
			if attempt > 0 {
				run = degradeScript.Eval
			}
			cmds[j] = run(ctx, pipe, []string{r.keys.Stream(shard), r.keys.Probe(shard)}, push.Channel(c.ActivityId), payload,
				r.keys.SeenPrefix(shard), r.bucketSec, strconv.FormatInt(c.Id, 10), strconv.FormatInt(c.Id%dedupeSubsets, 10),
				clocks[i].notAfter(wait, bounded))
		}
		_, err := pipe.Exec(ctx)
		// A script cache flushed under us (restart, failover): run those
		// again with EVAL. NOSCRIPT means the call did not run, so nothing
		// is published twice.
		var retry []int
		for j, cmd := range cmds {
			i := todo[j]
			if e := cmd.Err(); e != nil {
				if attempt > 0 || !redis.HasErrorPrefix(e, "NOSCRIPT") {
					fail(i, wrapWithin("repo.publishSingles", e, reportTimeout))
					continue
				}
				retry = append(retry, i)
				continue
			}
			v, _ := cmd.Int64()
			if v == degradeLate {
				fail(i, &opError{op: "repo.publishSingles", err: errDegradeLate, unavailable: true, within: reportTimeout})
				continue
			}
			if v == degradeKnown {
				if known == nil {
					known = make(map[int64]bool)
				}
				known[cs[i].Id] = true
			}
		}
		if len(retry) == 0 {
			// A guard's error (guardResend; NOPERM for a user denied
			// EXISTS) is no matter: every script answered.
			if err != nil && errs == nil && !slices.ContainsFunc(guards, func(g *redis.IntCmd) bool { return g.Err() == err }) {
				return known, failAll(wrapWithin("repo.publishSingles", err, reportTimeout))
			}
			return known, errs
		}
		todo = retry
	}
}

// degrade.lua's answers for an id already remembered, and for a call run
// past its deadline.
const (
	degradeKnown = 2
	degradeLate  = 3
)

// errDegradeLate: a degraded publish reached Redis after its sender had
// stopped waiting for it, and changed nothing.
var errDegradeLate = errors.New("degraded publish ran past its deadline, its sender no longer waiting: nothing published")

// redisClock is a reading of a Redis node's clock (ms) and when it was
// read here; the zero value is none.
type redisClock struct {
	ms   int64
	read time.Time
}

// notAfter is the deadline, on the node's clock, of a send whose answer
// is waited for wait from now (no bound unless bounded): 0, none, without
// a reading.
func (k redisClock) notAfter(wait time.Duration, bounded bool) int64 {
	if k.ms <= 0 || !bounded {
		return 0
	}
	return k.ms + time.Since(k.read).Milliseconds() + max(wait.Milliseconds(), 1)
}

// replyWait is how long the client waits for the answer to a send made
// now with ctx: the earlier of ctx's deadline and its read timeout;
// bounded false when neither bounds it.
func (r *Repo) replyWait(ctx context.Context) (wait time.Duration, bounded bool) {
	wait = r.ReplyTimeout()
	bounded = wait > 0
	if d, ok := ctx.Deadline(); ok {
		if left := time.Until(d); !bounded || left < wait {
			wait, bounded = left, true
		}
	}
	return wait, bounded
}
