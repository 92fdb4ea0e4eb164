package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// twinGoneAfter is how many claims in a row must find no other process
// claiming this consumer before it is said to be gone: two twins claim
// every settingsWatchEvery each, and a tick that lands just after the
// other's can miss one claim.
const twinGoneAfter = 3

// consumerClaim claims this replica's worker.consumer for this process
// (repo.ClaimConsumer), at each reading of the settings watch, and warns
// when another process claimed it since: two processes given one name (a
// Deployment with COMBO_WORKER_CONSUMER set for every pod, two on one host
// left to the host name) push each window once all the same, but share
// one settings key, so the settings watch cannot compare them, and README
// says each must have its own. The claim found by the first claim that
// succeeds is not counted: it may be this replica's own from before a
// crash (a claim lives 90 s). A replica before cb8ae74 does not claim, so
// a twin of it goes unseen.
type consumerClaim struct {
	claim    func(ctx context.Context, instance string) (string, error) // the other process found, or ""
	instance string                                                     // this process, as claims name it
	log      *zap.Logger                                                // names this process (and the consumer: the watch's)
	shared   prometheus.Gauge                                           // 1 while twin is set, for an alert
	claimed  bool                                                       // a claim has succeeded
	failed   bool                                                       // a failure before that was said
	twin     string                                                     // the other process found, while warned of
	alone    int                                                        // claims since one found it, while twin is set
}

// newConsumerClaim names this process (processInstance) in the claims
// that claim makes, and in its lines on log, which names the consumer
// (the settings watch's logger), and sets shared to 1 while it finds
// another process (a log line alone reaches no one who watches alerts).
func newConsumerClaim(claim func(ctx context.Context, instance string) (string, error), log *zap.Logger,
	shared prometheus.Gauge) *consumerClaim {
	instance := processInstance()
	shared.Set(0)
	return &consumerClaim{claim: claim, instance: instance, log: log.With(zap.String("this_process", instance)),
		shared: shared}
}

// check claims once, and says when another process is found claiming
// the consumer, and when none has for twinGoneAfter claims.
func (c *consumerClaim) check(ctx context.Context) {
	twin, err := c.claim(ctx, c.instance)
	if errors.Is(err, context.Canceled) {
		return // cut short by the watch's Stop: no news
	}
	if err != nil {
		// Before any claim succeeded it is said once: a user denied SET,
		// say, would otherwise leave the check off unseen.
		if !c.claimed && !c.failed {
			c.failed = true
			c.log.Warn("could not claim this replica's worker.consumer; another process given it goes unseen until a claim succeeds; will try again",
				zap.Error(err))
		} else {
			c.log.Debug("could not claim this replica's worker.consumer", zap.Error(err))
		}
		return
	}
	if !c.claimed {
		c.claimed = true
		return
	}
	switch {
	case twin != "":
		if c.twin == "" {
			c.log.Warn("another process runs with this replica's worker.consumer: each replica must have its own "+
				"(README: Replicas); the two share one consumer's pending entries and one settings key, "+
				"so a difference between their settings goes unseen",
				zap.String("other_process", twin))
		}
		c.twin, c.alone = twin, 0
		c.shared.Set(1)
	case c.twin != "":
		if c.alone++; c.alone >= twinGoneAfter {
			c.log.Info("no other process has run with this replica's worker.consumer for three claims: the one "+
				"warned of is gone",
				zap.String("other_process", c.twin))
			c.twin, c.alone = "", 0
			c.shared.Set(0)
		}
	}
}

// processInstance names this process in its claim of its consumer (and in
// the other's warning): the host and pid say where to look, and random
// bytes tell apart two containers that share both (pid 1, host network).
func processInstance() string {
	host, _ := os.Hostname()
	var b [4]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return fmt.Sprintf("%s pid %d %x", host, os.Getpid(), b)
}
