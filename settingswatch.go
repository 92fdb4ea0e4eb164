package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/combo-service/combo-service/conf"
	"github.com/combo-service/combo-service/internal/logging"
	"github.com/combo-service/combo-service/metrics"
	"github.com/combo-service/combo-service/repo"
)

// settingsWatchEvery is how often settingsWatch shares this replica's
// settings and reads the others'; each replica's key lives three times
// that, so a replica killed drops out of the others' view within about
// two minutes (its key's 90 s, then their next reading).
const settingsWatchEvery = 30 * time.Second

// replicaSettings is what settingsWatch compares between replicas: the
// settings every replica must share (README, "Whatever the versions"), as
// Redis is given them. Two replicas agree exactly when these strings are
// equal: durations are written by time.Duration.String, whatever form the
// configuration used, and window.dedupe as the buckets it makes (1500ms
// and 2s make the same; they were said to differ) and window.stale in the
// whole milliseconds the scripts are sent (window.size and window.grace
// are whole milliseconds already: conf.Validate).
func replicaSettings(cfg conf.Config) string {
	w := cfg.Window
	return fmt.Sprintf("redis.shards=%d window.size=%s window.grace=%s window.dedupe=%s window.stale=%s",
		cfg.Redis.Shards, w.Size, w.Grace, repo.DedupeBucket(w.Dedupe), w.Stale.Truncate(time.Millisecond))
}

// settingsWatch keeps this replica's settings in Redis and compares them
// with the other replicas' (repo.ShareSettings), at start and every 30 s.
// Replicas with other redis.shards or window.* settings count a combo
// key's reports twice (two shards, or dedupe buckets numbered apart) or
// cut its windows by another rule; README says to change them by stopping
// every replica, and a rolling update (a Deployment's default) does not,
// with nothing else to tell. It logs the replicas found differing (in one
// line a reading), and again once they agree or are gone, and exports how
// many differ (combo_replicas_settings_differ, which
// ComboReplicaSettingsDiffer reads).
// A reading that fails leaves what was last read. It is not started with
// the embedded Redis, which no other replica shares.
//
// At each reading it also claims this replica's worker.consumer for this
// process (consumerClaim), since two processes given one name share one
// settings key, and this watch cannot compare them.
//
// Shutdown order: it stops as run returns, after the worker's shutdown,
// and deletes this replica's key (so one started next with other settings
// is not compared with it; not while another process holds its claim:
// Stop), before the Redis client closes (run's deferred closeRedis,
// deferred before it).
type settingsWatch struct {
	share   func(context.Context) (map[string]string, error) // others' settings, by consumer
	claim   *consumerClaim
	forget  func(ctx context.Context, instance string) (bool, error) // false: another process holds the claim
	mine    string
	every   time.Duration
	timeout time.Duration // of one reading
	log     *zap.Logger
	m       *metrics.Metrics
	differ  map[string]string // consumer -> settings, of replicas found differing
	started bool              // a reading has been made
	loop    *ticking
}

func newSettingsWatch(share func(context.Context) (map[string]string, error), claim *consumerClaim,
	forget func(ctx context.Context, instance string) (bool, error), mine string, every, timeout time.Duration, log *zap.Logger, m *metrics.Metrics) *settingsWatch {
	return &settingsWatch{share: share, claim: claim, forget: forget, mine: mine, every: every, timeout: timeout,
		log: log, m: m, differ: map[string]string{}}
}

// newReplicaSettingsWatch is the settings watch run starts: it keeps
// cfg's replicaSettings under worker.consumer in store, for three of its
// intervals, claims that consumer for this process as long, and logs as
// settings_watch, each line naming the consumer.
func newReplicaSettingsWatch(cfg conf.Config, store *repo.Repo, log *zap.Logger, m *metrics.Metrics) *settingsWatch {
	self, mine := cfg.Worker.Consumer, replicaSettings(cfg)
	log = logging.Sampled(log.Named("settings_watch"), m.LogSuppressed).With(zap.String("consumer", self))
	return newSettingsWatch(
		func(ctx context.Context) (map[string]string, error) {
			return store.ShareSettings(ctx, self, mine, 3*settingsWatchEvery)
		},
		newConsumerClaim(func(ctx context.Context, instance string) (string, error) {
			return store.ClaimConsumer(ctx, self, instance, 3*settingsWatchEvery)
		}, log, m.ConsumerShared),
		func(ctx context.Context, instance string) (bool, error) {
			return store.ForgetSettings(ctx, self, instance)
		},
		mine, settingsWatchEvery, 2*cfg.Redis.Timeout, log, m)
}

// Start reads once, then runs the loop until Stop.
func (w *settingsWatch) Start() {
	w.once(context.Background())
	w.loop = startTicking(w.every, w.once)
}

// once shares and compares one time; a panic is logged, counted, and the
// loop goes on.
func (w *settingsWatch) once(ctx context.Context) {
	defer func() {
		if p := recover(); p != nil {
			w.m.LoopPanics.WithLabelValues(metrics.LoopSettingsWatch).Inc()
			w.log.Error("recovered panic in the settings watch loop", zap.Any("panic", p), zap.Stack("stack"))
		}
	}()
	// The claim has time of its own: the sharing may take four round
	// trips.
	claimCtx, cancelClaim := context.WithTimeout(ctx, w.timeout)
	defer cancelClaim()
	w.claim.check(claimCtx)
	if ctx.Err() != nil {
		return // a reading cut short by Stop is no news
	}
	readCtx, cancel := context.WithTimeout(ctx, w.timeout)
	defer cancel()
	others, err := w.share(readCtx)
	if ctx.Err() != nil {
		return
	}
	first := !w.started
	w.started = true
	if err != nil {
		// At start it is said once: a user denied a command, say, would
		// otherwise leave the check off unseen.
		if first {
			w.log.Warn("could not compare this replica's settings with the other replicas'; will try again", zap.Error(err))
		} else {
			w.log.Debug("could not compare this replica's settings with the others'", zap.Error(err))
		}
		return
	}
	// One line for all the replicas of a reading: the log is sampled by
	// message, and a rolling update shows a new replica every old one at
	// once.
	found := map[string]string{}
	for replica, theirs := range others {
		if theirs != w.mine && theirs != w.differ[replica] {
			found[replica] = theirs
			w.differ[replica] = theirs
		}
	}
	if len(found) > 0 {
		w.log.Warn("other replicas run with other settings: a combo key's reports may be counted twice "+
			"or its windows cut by another rule; every replica must have the same redis.shards and window.* "+
			"(change them by stopping every replica, README)",
			zap.Any("replica_settings", found), zap.String("settings", w.mine))
	}
	var settled []string
	for _, replica := range slices.Sorted(maps.Keys(w.differ)) {
		if theirs, ok := others[replica]; !ok || theirs == w.mine {
			settled = append(settled, replica)
			delete(w.differ, replica)
		}
	}
	if len(settled) > 0 {
		w.log.Info("replicas found with other settings now agree or are gone", zap.Strings("replicas", settled))
	}
	w.m.ReplicasSettingsDiffer.Set(float64(len(w.differ)))
}

// Stop ends the loop, waits for it, and deletes this replica's settings,
// unless another process given its worker.consumer runs: one claimed it
// since, or this one's claims last found one (it may have claimed last,
// so the claim alone cannot tell). That one still runs, and the settings
// key is its too; left, it all expires 90 s after the last one stops.
func (w *settingsWatch) Stop() {
	w.loop.stop() // waited for: the claim's twin is read after its last check
	if w.claim.twin != "" {
		w.log.Info("another process runs with this replica's worker.consumer: its settings and claim are left to it",
			zap.String("other_process", w.claim.twin))
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), w.timeout)
	defer cancel()
	forgot, err := w.forget(ctx, w.claim.instance)
	switch {
	case err != nil:
		w.log.Debug("could not delete this replica's settings; they expire on their own", zap.Error(err))
	case !forgot:
		w.log.Info("another process holds this replica's worker.consumer: its settings and claim are left to it")
	}
}
