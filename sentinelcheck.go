package main

import (
	"context"
	"crypto/tls"
	"errors"
	"sync"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/combo-service/combo-service/conf"
)

// switchMaster is the Sentinel channel on which a failover is announced:
// the service listens on it on every Sentinel (sentinelWatch). go-redis's
// failover client subscribes to it and +replica-reconf-done together on
// one Sentinel; a user denied either gets neither there, which the
// service's own subscriptions make up for while this one is allowed.
const switchMaster = "+switch-master"

// checkSentinels asks each Sentinel, once at start, what a failover needs
// of it, and logs what is missing, naming the Sentinel:
//   - that it knows a master named redis.sentinel_master: without one every
//     report fails, with go-redis's words "all sentinels ... are
//     unreachable: redis: nil", which name neither the setting nor the
//     cause;
//   - that the Sentinel user may SUBSCRIBE to +switch-master. Redis 7
//     gives a new ACL user no channels, on a Sentinel too: the service
//     then learns of a failover only when the old master is demoted,
//     about 10 s later, while the old master acknowledges reports that are
//     lost with it (a review measured 489 lost against 46 with the channel
//     allowed).
//
// A Sentinel that cannot be asked (down, hung, a login it refuses, not a
// Sentinel at all) is logged too: while it cannot answer, it tells the
// service of no failover, and nothing else would say so while the others
// answer. Each Sentinel is asked on its own, at once, within its own
// time: one that never answers used up a budget shared with the others,
// and the others' missing channels went unreported.
func checkSentinels(ctx context.Context, r conf.Redis, tlsConfig *tls.Config, log *zap.Logger) {
	var wg sync.WaitGroup
	for _, addr := range r.SentinelAddrs {
		wg.Go(func() { checkSentinel(ctx, r, tlsConfig, addr, log) })
	}
	wg.Wait()
}

// sentinelCheckTime bounds the check of one Sentinel, in redis.timeout:
// four round trips, a lookup and a subscription, each on a new connection
// that go-redis opens with HELLO. Counted as two, a Sentinel answering
// each command in 0.6 redis.timeout was warned of as unreachable.
const sentinelCheckTime = 4

func checkSentinel(ctx context.Context, r conf.Redis, tlsConfig *tls.Config, addr string, log *zap.Logger) {
	ctx, cancel := context.WithTimeout(ctx, sentinelCheckTime*r.Timeout)
	defer cancel()
	sc := redis.NewSentinelClient(nodeOptions(r, tlsConfig, addr, r.SentinelUsername, r.SentinelPassword))
	defer sc.Close()
	_, err := sc.GetMasterAddrByName(ctx, r.SentinelMaster).Result()
	switch {
	case errors.Is(err, redis.Nil):
		log.Error("this Sentinel knows no master of that name (redis.sentinel_master): reports fail while no Sentinel does",
			zap.String("sentinel", addr), zap.String("sentinel_master", r.SentinelMaster))
		return
	case err != nil:
		log.Warn("could not ask this Sentinel where the master is (is it up, a Sentinel, and does it take "+
			"redis.sentinel_username and redis.sentinel_password?): while it cannot answer, it tells the service of no failover",
			zap.String("sentinel", addr), zap.Error(err))
		return
	}
	err = subscribeSwitchMaster(ctx, sc)
	switch {
	case err != nil && redis.HasErrorPrefix(err, "NOPERM"):
		log.Warn("the Sentinel user may not SUBSCRIBE to +switch-master: a failover is then "+
			"noticed only when the old master is demoted, about 10 s later, and reports it acknowledges meanwhile "+
			"are lost; grant it the channels (ACL SETUSER <user> &+switch-master &+replica-reconf-done, see README)",
			zap.String("sentinel", addr), zap.Error(err))
	case err != nil:
		log.Warn("could not try a subscription to this Sentinel's +switch-master",
			zap.String("sentinel", addr), zap.Error(err))
	}
}

// subscribeSwitchMaster subscribes as sentinelWatch does, and says
// whether the Sentinel let it.
func subscribeSwitchMaster(ctx context.Context, sc *redis.SentinelClient) error {
	ps := sc.Subscribe(ctx, switchMaster)
	defer ps.Close()
	_, err := ps.Receive(ctx)
	return err
}
