package conf

import "fmt"

// Sentinel reports whether the service finds its Redis through Sentinels.
func (r Redis) Sentinel() bool { return len(r.SentinelAddrs) > 0 }

// validateSentinel refuses redis.sentinel_* settings that are half set or
// that clash with another way of naming the Redis.
func validateSentinel(r Redis, bad func(key, format string, args ...any)) {
	if !r.Sentinel() {
		if r.SentinelMaster != "" || r.SentinelUsername != "" || r.SentinelPassword != "" {
			bad("redis.sentinel_addrs", "must name the Sentinels when redis.sentinel_master, "+
				"redis.sentinel_username or redis.sentinel_password is set")
		}
		return
	}
	for i, a := range r.SentinelAddrs {
		if msg := checkHostPort(a, "redis.sentinel_password"); msg != "" {
			bad(fmt.Sprintf("redis.sentinel_addrs[%d]", i), "must be host:port, %s", msg)
		}
	}
	if r.SentinelMaster == "" {
		bad("redis.sentinel_master", "must name the master the Sentinels watch (their 'sentinel monitor <name>')")
	}
	if r.Addr != "" || len(r.Addrs) > 0 {
		bad("redis.sentinel_addrs", "set one of redis.addr (one Redis), redis.addrs (a cluster) "+
			"or redis.sentinel_addrs (a Redis the Sentinels fail over)")
	}
	// As for redis.username: go-redis logs in only with a password.
	if r.SentinelUsername != "" && r.SentinelPassword == "" {
		bad("redis.sentinel_username", "needs redis.sentinel_password: without one the client never logs in as %q",
			r.SentinelUsername)
	}
}
