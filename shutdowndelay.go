package main

import (
	"context"
	"time"

	"go.uber.org/zap"
)

// afterDelay returns a context that ends delay after ctx does (ctx itself
// for a delay of 0), and a cancel that ends it at once.
//
// It is when the RPC server stops taking connections: /readyz fails from
// the signal on (ctx), while RPCs are still taken for server.shutdown_delay,
// so an orchestrator that removes the replica from its endpoints only
// after signalling it (Kubernetes) has done so before the port closes.
// The worker runs on meanwhile, publishing as usual.
func afterDelay(ctx context.Context, delay time.Duration, log *zap.Logger) (context.Context, context.CancelFunc) {
	if delay <= 0 {
		return ctx, func() {}
	}
	// Without ctx's cancellation: ended by the timer (or cancel), not by
	// the signal.
	out, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() {
		log.Info("stopping: /readyz fails from now on; RPCs are still taken for server.shutdown_delay, while the replica leaves its endpoints",
			zap.Duration("shutdown_delay", delay))
		time.AfterFunc(delay, cancel) // a cancel before it fires makes it a no-op
	})
	return out, func() { stop(); cancel() }
}
