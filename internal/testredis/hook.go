package testredis

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// PipelineHook is a go-redis hook that calls itself with each pipeline's
// commands before the pipeline reaches Redis, on the goroutine sending it:
// tests use it to count, hold or delay pipelines. Single commands and
// dials pass through untouched.
type PipelineHook func(cmds []redis.Cmder)

// DialHook passes dials through.
func (h PipelineHook) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook passes single commands through.
func (h PipelineHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

// ProcessPipelineHook calls h, then sends the pipeline.
func (h PipelineHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h(cmds)
		return next(ctx, cmds)
	}
}
