package conf

import (
	"strings"
	"testing"
)

func TestSentinelFromEnvironment(t *testing.T) {
	t.Setenv("COMBO_REDIS_SENTINEL_ADDRS", "s1:26379, s2:26379")
	t.Setenv("COMBO_REDIS_SENTINEL_MASTER", "combo")
	t.Setenv("COMBO_REDIS_SENTINEL_PASSWORD", "pw")
	c, err := Load("")
	if err != nil {
		t.Fatal(err)
	}
	if !c.Redis.Sentinel() || c.Embedded() || c.Redis.SentinelMaster != "combo" || c.Redis.SentinelPassword != "pw" ||
		strings.Join(c.Redis.SentinelAddrs, ",") != "s1:26379,s2:26379" {
		t.Fatalf("sentinel settings not read: %+v", c.Redis)
	}
}

func TestSentinelSettingsAreChecked(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(r *Redis)
		want   string
	}{
		{"a master name without Sentinels", func(r *Redis) { r.SentinelAddrs = nil; r.Addr = "10.0.0.1:6379" },
			"redis.sentinel_addrs: must name the Sentinels"},
		{"Sentinels without a master name", func(r *Redis) { r.SentinelMaster = "" }, "redis.sentinel_master: must name the master"},
		{"Sentinels and redis.addr", func(r *Redis) { r.Addr = "10.0.0.1:6379" }, "redis.sentinel_addrs: set one of redis.addr"},
		{"Sentinels and a cluster", func(r *Redis) { r.Addrs = []string{"10.0.0.1:6379"} }, "redis.sentinel_addrs: set one of redis.addr"},
		// The hint names the Sentinels' password key: redis.password is
		// the Redis's, and a Sentinel password put there is never sent.
		{"a Sentinel address with a password in it", func(r *Redis) { r.SentinelAddrs = []string{"redis://:pw@s1:26379"} },
			"redis.sentinel_addrs[0]: must be host:port, got a URL, userinfo or options (the value is not repeated: " +
				"it may hold a password, which goes in redis.sentinel_password)"},
		{"a Sentinel user without a password", func(r *Redis) { r.SentinelUsername = "watcher" },
			"redis.sentinel_username: needs redis.sentinel_password"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			c.Redis.SentinelAddrs, c.Redis.SentinelMaster = []string{"s1:26379"}, "combo"
			if err := c.Validate(); err != nil {
				t.Fatalf("the unchanged settings must be valid: %v", err)
			}
			tc.mutate(&c.Redis)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %v, want %q", err, tc.want)
			}
			if strings.Contains(err.Error(), ":pw@") {
				t.Fatalf("Validate() repeats a password: %v", err)
			}
		})
	}
}
