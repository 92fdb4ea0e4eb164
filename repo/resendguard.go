package repo

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// guardResend puts, on a Redis Cluster, a read of shard's stream (EXISTS)
// ahead of shard's scripts in pipe.
//
// After reading a node's part of a pipeline, go-redis's cluster client
// sends that whole part again when its first command got a retriable
// error (TRYAGAIN while a slot moves, CLUSTERDOWN, LOADING), scripts
// Redis had run and answered included: a report this call counted, on
// another shard of the same master, was run again and answered duplicate
// (window 0, quantity 0), its window missing from combo_windows_opened_total
// and from WindowsOpened. A single-key read is never refused TRYAGAIN (a
// moving key is answered ASK, which go-redis follows for that command
// alone), so with one first on every node the scripts' errors stay on
// their own commands: execute sends again only those refused TRYAGAIN
// (tryAgainBackoff). The guard's own answer, or error, is no matter.
//
// On one Redis, go-redis sends a pipeline again only after a network
// error, when the answers were lost; nothing to guard.
func (r *Repo) guardResend(ctx context.Context, pipe redis.Pipeliner, shard int) *redis.IntCmd {
	if !r.cluster {
		return nil
	}
	return pipe.Exists(ctx, r.keys.Stream(shard))
}

// tryAgainBackoff is how long execute waits before each new send of the
// reports refused TRYAGAIN (their slot moving between masters), as
// go-redis's cluster client did for a node's whole part: a move that
// ends within about 70 ms is ridden through; a longer one fails those
// reports UNAVAILABLE, and their callers send them again.
var tryAgainBackoff = []time.Duration{10 * time.Millisecond, 20 * time.Millisecond, 40 * time.Millisecond}

// isTryAgain tells whether err is Redis's TRYAGAIN: a script's keys are
// split between two masters while their slot moves. The script did not
// run.
func isTryAgain(err error) bool { return err != nil && redis.HasErrorPrefix(err, "TRYAGAIN") }

// sleepCtx waits d, or until ctx is done (its error).
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
