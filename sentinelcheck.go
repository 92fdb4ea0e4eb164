package main

import (
	"context"
	"crypto/tls"
	"errors"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/combo-service/combo-service/conf"
)

// failoverChannels are the Sentinel channels go-redis's failover client
// subscribes to, in one SUBSCRIBE (go-redis v9.23 sentinel.go): a user
// denied either is refused both.
var failoverChannels = []string{"+switch-master", "+replica-reconf-done"}

// checkSentinels asks each Sentinel, once at start, what a failover needs
// of it, and logs what is missing, naming the Sentinel:
//   - that it knows a master named redis.sentinel_master: without one every
//     report fails, with go-redis's words "all sentinels ... are
//     unreachable: redis: nil", which name neither the setting nor the
//     cause;
//   - that the Sentinel user may SUBSCRIBE to +switch-master and
//     +replica-reconf-done, as go-redis does. Redis 7
//     gives a new ACL user no channels, on a Sentinel too: go-redis's
//     subscription then fails without a word, and the service learns of a
//     failover only when the old master is demoted, about 10 s later,
//     while the old master acknowledges reports that are lost with it (a
//     review measured 489 lost against 46 with the channel allowed).
//
// A Sentinel that does not answer is left to the warnings of the report
// path: the others may answer.
func checkSentinels(ctx context.Context, r conf.Redis, tlsConfig *tls.Config, log *zap.Logger) {
	for _, addr := range r.SentinelAddrs {
		sc := redis.NewSentinelClient(nodeOptions(r, tlsConfig, addr, r.SentinelUsername, r.SentinelPassword))
		_, err := sc.GetMasterAddrByName(ctx, r.SentinelMaster).Result()
		switch {
		case errors.Is(err, redis.Nil):
			log.Error("this Sentinel knows no master of that name (redis.sentinel_master): reports fail while no Sentinel does",
				zap.String("sentinel", addr), zap.String("sentinel_master", r.SentinelMaster))
		case err == nil:
			if err := subscribeFailoverChannels(ctx, sc); err != nil && redis.HasErrorPrefix(err, "NOPERM") {
				log.Warn("the Sentinel user may not SUBSCRIBE to +switch-master and +replica-reconf-done: a failover is then "+
					"noticed only when the old master is demoted, about 10 s later, and reports it acknowledges meanwhile "+
					"are lost; grant it the channels (ACL SETUSER <user> &+switch-master &+replica-reconf-done, see README)",
					zap.String("sentinel", addr), zap.Error(err))
			}
		}
		_ = sc.Close()
	}
}

// subscribeFailoverChannels subscribes as go-redis does, and says whether
// the Sentinel let it.
func subscribeFailoverChannels(ctx context.Context, sc *redis.SentinelClient) error {
	ps := sc.Subscribe(ctx, failoverChannels...)
	defer ps.Close()
	_, err := ps.Receive(ctx)
	return err
}
