package repo

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// sendOnce is a hook, installed by New, under which go-redis never sends a
// XREADGROUP or XAUTOCLAIM a second time: an attempt that fails fails the
// call.
//
// Both deliver entries as they run: XREADGROUP ">" hands the new ones to
// the consumer, XAUTOCLAIM takes idle ones over. When Redis ran one and
// only its reply was lost (a reset, EOF, a read timeout), the entries are
// pending on this consumer and no later ">" or claim returns them before
// they idle worker.claim_idle: the worker's defence is to read its own
// pending entries again ("0") whenever Read or Claim fails. A second send
// by go-redis hides that failure: it answers nothing new, Read or Claim
// succeeds, and the window waits a claim_idle, or is dropped stale.
//
// MaxRetries -1 stops the single-node client's resends, not the Cluster
// client's: its loop (bounded by MaxRedirects, which also bounds MOVED and
// ASK, so it must stay) sends a command again after EOF or a reset, and
// after a read timeout when the command has no read timeout of its own (a
// XAUTOCLAIM, a XREADGROUP without BLOCK). It skips that for a command
// whose NoRetry() is true, go-redis's per-command flag for commands that
// must not run twice; it still follows MOVED, ASK and READONLY, which say
// the command did not run. So the hook hands such commands on as a Cmder
// whose NoRetry is true, the command itself underneath: its reply, error
// and read timeout (BLOCK's) are the original's.
//
// A hook on the client, not on its nodes: the Cluster client's hooks run
// once per call around its whole loop, and apply to every node, including
// ones it meets later; a node hook (OnNewNode) misses the nodes the client
// created before it was added.
type sendOnce struct{}

func (sendOnce) DialHook(next redis.DialHook) redis.DialHook { return next }

func (sendOnce) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (sendOnce) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if _, done := cmd.(noRetryCmd); !done { // a second repo on the client adds the hook again
			switch cmd.Name() {
			case "xreadgroup", "xautoclaim":
				cmd = noRetryCmd{cmd}
			}
		}
		return next(ctx, cmd)
	}
}

// noRetryCmd is cmd with NoRetry true: go-redis does not send it again
// after a failure that may have come after Redis ran it.
type noRetryCmd struct{ redis.Cmder }

func (noRetryCmd) NoRetry() bool { return true }
