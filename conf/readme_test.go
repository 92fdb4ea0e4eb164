package conf

import (
	"fmt"
	"math"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
)

// README's configuration table is what operators read: each key's default
// column must be what Default() (through Load) gives.
func TestDefaultsMatchREADMETable(t *testing.T) {
	raw, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	c, err := Load("")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{
		"server.addr": c.Server.Addr, "server.shutdown_timeout": c.Server.ShutdownTimeout.String(),
		"server.shutdown_delay":  c.Server.ShutdownDelay.String(),
		"server.max_connections": fmt.Sprint(c.Server.MaxConnections), "metrics.addr": c.Metrics.Addr,
		"metrics.pprof": fmt.Sprint(c.Metrics.Pprof), "redis.embedded_addr": c.Redis.EmbeddedAddr,
		"redis.db": fmt.Sprint(c.Redis.DB), "redis.timeout": c.Redis.Timeout.String(),
		"redis.shards": fmt.Sprint(c.Redis.Shards), "redis.stream_maxlen": fmt.Sprint(c.Redis.StreamMaxLen),
		"redis.conn_max_lifetime": c.Redis.ConnMaxLifetime.String(), "redis.pool_size": fmt.Sprint(c.Redis.PoolSize),
		"redis.tls": fmt.Sprint(c.Redis.TLS), "window.size": c.Window.Size.String(),
		"window.grace": c.Window.Grace.String(), "window.dedupe": c.Window.Dedupe.String(),
		"window.stale": c.Window.Stale.String(), "worker.read_count": fmt.Sprint(c.Worker.ReadCount),
		"worker.batch_size": fmt.Sprint(c.Worker.BatchSize), "worker.block": c.Worker.Block.String(),
		"log.level": c.Log.Level, "log.format": c.Log.Format,
	}
	// Durations as README writes them ("60s", "1s") against Go's ("1m0s").
	norm := func(s string) string {
		if d, err := time.ParseDuration(s); err == nil {
			return d.String()
		}
		return s
	}
	row := regexp.MustCompile("(?m)^\\| ([a-z_.]+) \\| COMBO_[A-Z_]+ \\| `([^`]*)` \\|")
	seen := 0
	for _, m := range row.FindAllStringSubmatch(string(raw), -1) {
		want, ok := got[m[1]]
		if !ok {
			continue
		}
		seen++
		if norm(m[2]) != norm(want) {
			t.Errorf("%s: README's default is %q, Default() gives %q", m[1], m[2], want)
		}
	}
	if seen != len(got) {
		t.Errorf("found %d of README's %d default rows", seen, len(got))
	}
}

// Each bound README states is enforced, and names its key. Unlike
// TestValidateNamesKey, every case starts from a configuration on which
// only that key can be wrong (a non-embedded Redis where it matters).
func TestValidateEnforcesREADMEBounds(t *testing.T) {
	remote := func(c *Config) { c.Redis.Addr = "redis.internal:6379" }
	cases := []struct {
		name, key string
		mutate    func(c *Config)
	}{
		{"shutdown_timeout 0", "server.shutdown_timeout", func(c *Config) { c.Server.ShutdownTimeout = 0 }},
		{"shutdown_delay -1ms", "server.shutdown_delay", func(c *Config) { c.Server.ShutdownDelay = -time.Millisecond }},
		{"shutdown_delay 1m1s", "server.shutdown_delay", func(c *Config) { c.Server.ShutdownDelay = time.Minute + time.Second }},
		{"db -1", "redis.db", func(c *Config) { c.Redis.DB = -1 }},
		{"db 1 on a cluster of one seed", "redis.db", func(c *Config) { c.Redis.Addrs, c.Redis.DB = []string{"10.0.0.1:7000"}, 1 }},
		{"shards 1025", "redis.shards", func(c *Config) { c.Redis.Shards = 1025 }},
		{"stream_maxlen 9999", "redis.stream_maxlen", func(c *Config) { c.Redis.StreamMaxLen = 9999 }},
		{"dedupe 999ms", "window.dedupe", func(c *Config) { c.Window.Dedupe = 999 * time.Millisecond }},
		{"claim_idle = stale", "worker.claim_idle", func(c *Config) { c.Worker.ClaimIdle = c.Window.Stale }},
		{"consumer_idle_delete < claim_idle", "worker.consumer_idle_delete", func(c *Config) { c.Worker.ConsumerIdleDelete = c.Worker.ClaimIdle - time.Millisecond }},
		{"log.level fatal", "log.level", func(c *Config) { c.Log.Level = "fatal" }},
		{"username without password", "redis.username", func(c *Config) { remote(c); c.Redis.Username = "combo" }},
		{"redis.addr port 0", "redis.addr", func(c *Config) { c.Redis.Addr = "redis.internal:0" }},
		{"sentinel_password without sentinel_addrs", "redis.sentinel_addrs", func(c *Config) { remote(c); c.Redis.SentinelPassword = "pw" }},
		{"sentinel_username without sentinel_addrs", "redis.sentinel_addrs", func(c *Config) { remote(c); c.Redis.SentinelUsername, c.Redis.SentinelPassword = "u", "pw" }},
		// Each bound next to its edge: a bound moved by one passed before.
		{"max_connections 2^31", "server.max_connections", func(c *Config) { c.Server.MaxConnections = math.MaxInt32 + 1 }},
		{"size 9ms", "window.size", func(c *Config) { c.Window.Size = 9 * time.Millisecond }},
		{"read_count 0", "worker.read_count", func(c *Config) { c.Worker.ReadCount = 0 }},
		{"batch_size 0", "worker.batch_size", func(c *Config) { c.Worker.BatchSize = 0 }},
		{"pool_size 100001", "redis.pool_size", func(c *Config) { c.Redis.PoolSize = 100_001 }},
		{"pool_size -1", "redis.pool_size", func(c *Config) { c.Redis.PoolSize = -1 }},
		{"log.format text", "log.format", func(c *Config) { c.Log.Format = "text" }},
		// An option list may carry a password, and the started line logs the address.
		{"redis.addr with an option", "redis.addr", func(c *Config) { c.Redis.Addr = "pw=x,redis.internal:6379" }},
		{"redis.addr without a host", "redis.addr", func(c *Config) { c.Redis.Addr = ":6379" }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			tc.mutate(&c)
			if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.key+":") {
				t.Fatalf("want an error naming %s, got %v", tc.key, err)
			}
		})
	}
}

// The edges README states are valid: a bound moved by one refused them.
func TestValidateAcceptsREADMEEdges(t *testing.T) {
	cases := map[string]func(c *Config){
		"shards 1024":            func(c *Config) { c.Redis.Shards = 1024 },
		"max_connections 2^31-1": func(c *Config) { c.Server.MaxConnections = math.MaxInt32 },
		"size 10ms":              func(c *Config) { c.Window.Size = 10 * time.Millisecond },
		"read_count 1":           func(c *Config) { c.Worker.ReadCount = 1 },
		"batch_size 1":           func(c *Config) { c.Worker.BatchSize = 1 },
		"pool_size 100000":       func(c *Config) { c.Redis.PoolSize = 100_000 },
		"log.level debug":        func(c *Config) { c.Log.Level = "debug" },
		"log.level info":         func(c *Config) { c.Log.Level = "info" },
		"log.level warn":         func(c *Config) { c.Log.Level = "warn" },
		"log.level error":        func(c *Config) { c.Log.Level = "error" },
		"log.format console":     func(c *Config) { c.Log.Format = "console" },
		"redis.addr with a host": func(c *Config) { c.Redis.Addr = "redis.internal:6379" },
		// The remaining edges README states ("0 to 1m", "1ms..1h", "at least
		// 10000", "1s..720h", "0 to 24h", "1s to 720h").
		"shutdown_delay 1m":      func(c *Config) { c.Server.ShutdownDelay = time.Minute },
		"shutdown_delay 2500ms":  func(c *Config) { c.Server.ShutdownDelay = 2500 * time.Millisecond },
		"timeout 1ms":            func(c *Config) { c.Redis.Timeout = time.Millisecond },
		"timeout 1h":             func(c *Config) { c.Redis.Timeout = time.Hour },
		"stream_maxlen 10000":    func(c *Config) { c.Redis.StreamMaxLen = 10_000 },
		"conn_max_lifetime 1s":   func(c *Config) { c.Redis.ConnMaxLifetime = time.Second },
		"conn_max_lifetime 720h": func(c *Config) { c.Redis.ConnMaxLifetime = 720 * time.Hour },
		"grace 0":                func(c *Config) { c.Window.Grace = 0 },
		"dedupe 1s":              func(c *Config) { c.Window.Dedupe = time.Second },
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			c := Default()
			mutate(&c)
			if err := c.Validate(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A window.stale exactly W + grace + 2s away: the derived claim_idle must
// still be valid (README: midway when those are 2 s apart or less).
func TestDerivedClaimIdleAtTheTwoSecondEdge(t *testing.T) {
	t.Setenv("COMBO_WINDOW_STALE", "5200ms") // W 3s + grace 200ms + 2s
	c, err := Load("")
	if err != nil {
		t.Fatalf("a valid window gave an invalid derived default: %v", err)
	}
	if c.Worker.ClaimIdle >= c.Window.Stale || c.Worker.ClaimIdle <= c.Window.Size+c.Window.Grace {
		t.Fatalf("claim_idle %s not strictly inside (W+grace, stale %s)", c.Worker.ClaimIdle, c.Window.Stale)
	}
}
