package conf

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestDefaultIsValid(t *testing.T) {
	c := Default()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.Server.Addr != ":8888" || c.Redis.Addr != "" || c.Redis.EmbeddedAddr != "127.0.0.1:0" || c.Window.Size != 3*time.Second ||
		c.Window.Grace != 200*time.Millisecond || c.Window.Dedupe != time.Minute || c.Window.Stale != time.Minute ||
		c.Log.Level != "info" || c.Worker.Consumer == "" || c.Worker.ClaimIdle != 5200*time.Millisecond ||
		c.Worker.ConsumerIdleDelete != 24*time.Hour {
		t.Fatalf("defaults differ from CONTRACT.md §4: %+v", c)
	}
	if host, err := os.Hostname(); err == nil && host != "" && c.Worker.Consumer != host {
		t.Fatalf("worker.consumer defaults to %q, want the host name %q (CONTRACT.md §4)", c.Worker.Consumer, host)
	}
	if !c.Embedded() {
		t.Fatal("empty redis.addr must mean embedded")
	}
}

func TestLoadNoFile(t *testing.T) {
	c, err := Load("")
	if err != nil {
		t.Fatal(err)
	}
	if c.Server.Addr != ":8888" {
		t.Fatalf("server.addr = %q", c.Server.Addr)
	}
}

func TestLoadFileThenEnvWins(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "combo.yaml")
	yaml := "server:\n  addr: \":9999\"\nredis:\n  addr: \"10.0.0.1:6379\"\n  db: 2\nwindow:\n  size: 2s\n  grace: 100ms\nlog:\n  level: debug\n"
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("COMBO_WINDOW_SIZE", "200ms")
	t.Setenv("COMBO_REDIS_DB", "3")
	t.Setenv("COMBO_WORKER_CONSUMER", "replica-a")
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if c.Server.Addr != ":9999" || c.Redis.Addr != "10.0.0.1:6379" || c.Log.Level != "debug" || c.Window.Grace != 100*time.Millisecond {
		t.Fatalf("file values not read: %+v", c)
	}
	if c.Window.Size != 200*time.Millisecond || c.Redis.DB != 3 || c.Worker.Consumer != "replica-a" {
		t.Fatalf("environment must win: %+v", c)
	}
	if c.Worker.ClaimIdle != 200*time.Millisecond+100*time.Millisecond+2*time.Second {
		t.Fatalf("claim_idle must follow the configured window, got %s", c.Worker.ClaimIdle)
	}
}

func TestLoadEnvList(t *testing.T) {
	t.Setenv("COMBO_REDIS_ADDRS", "127.0.0.1:7000,127.0.0.1:7001")
	c, err := Load("")
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Redis.Addrs) != 2 || c.Redis.Addrs[1] != "127.0.0.1:7001" || c.Embedded() {
		t.Fatalf("redis.addrs = %q", c.Redis.Addrs)
	}
}

// README: metrics.addr "empty = off", redis.addr "empty ... = embedded";
// the environment wins over the file, so an empty variable must win too.
func TestLoadEmptyEnvIsAValue(t *testing.T) {
	path := filepath.Join(t.TempDir(), "combo.yaml")
	if err := os.WriteFile(path, []byte("redis:\n  addr: \"10.0.0.1:6379\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("COMBO_METRICS_ADDR", "")
	t.Setenv("COMBO_REDIS_ADDR", "")
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if c.Metrics.Addr != "" {
		t.Errorf("COMBO_METRICS_ADDR= must turn metrics off, got metrics.addr %q", c.Metrics.Addr)
	}
	if !c.Embedded() {
		t.Errorf("COMBO_REDIS_ADDR= must select the embedded Redis over the file's, got redis.addr %q", c.Redis.Addr)
	}
}

func TestLoadRefusesUnknownKeys(t *testing.T) {
	path := filepath.Join(t.TempDir(), "combo.yaml")
	if err := os.WriteFile(path, []byte("redis:\n  adress: \"10.0.0.1:6379\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(path)
	if err == nil || !strings.Contains(err.Error(), "adress") {
		t.Fatalf("a misspelled key must be refused, naming it; got %v", err)
	}
}

// A file of several YAML documents is refused: viper read only the first,
// so a redis.addr (or a typo) after a "---" was ignored, and a first
// document of only a comment started the service on the embedded Redis.
// One document, after a leading "---" or before a trailing one, is read.
func TestLoadRefusesMoreThanOneDocument(t *testing.T) {
	path := filepath.Join(t.TempDir(), "combo.yaml")
	for _, body := range []string{
		"log:\n  level: debug\n---\nredis:\n  addr: \"10.0.0.9:6379\"\n",
		"---\n# combo-service\n---\nredis:\n  addr: \"10.0.0.1:6379\"\n  adress: typo\n",
	} {
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		c, err := Load(path)
		if err == nil || !strings.Contains(err.Error(), "2 YAML documents") {
			t.Errorf("Load of %q = redis.addr %q, %v; want it refused, saying the file holds 2 documents", body, c.Redis.Addr, err)
		}
	}
	for _, body := range []string{
		"---\nredis:\n  addr: \"10.0.0.1:6379\"\n",
		"redis:\n  addr: \"10.0.0.1:6379\"\n---\n",
		"redis:\n  addr: \"10.0.0.1:6379\"\n---\n# nothing more\n",
		"redis:\n  addr: \"10.0.0.1:6379\"\n--- {}\n",
	} {
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if c, err := Load(path); err != nil || c.Redis.Addr != "10.0.0.1:6379" {
			t.Errorf("Load of %q = redis.addr %q, %v; want the file's", body, c.Redis.Addr, err)
		}
	}
}

// A bare number (or a boolean) where a duration goes is refused, naming
// the key, not read as nanoseconds (redis.timeout: 500 would be 500ns).
func TestLoadRefusesNumberForDuration(t *testing.T) {
	for _, yaml := range []string{"redis:\n  timeout: 500\n", "server:\n  shutdown_timeout: 30\n", "worker:\n  block: 1.5\n",
		"server:\n  shutdown_timeout: true\n", "worker:\n  consumer_idle_delete: 86400\n"} {
		path := filepath.Join(t.TempDir(), "combo.yaml")
		if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		key := strings.Fields(strings.ReplaceAll(yaml, ":", " "))[1]
		_, err := Load(path)
		if err == nil || !strings.Contains(err.Error(), key) || !strings.Contains(err.Error(), "duration string") {
			t.Errorf("%q: want an error naming %s and asking for a duration string, got %v", yaml, key, err)
		}
	}
}

// A string that is no Go duration, from the environment or quoted in the
// file, is refused naming the key, the value and the form wanted: it was
// "'window.size' time: missing unit in duration", while a YAML number got
// a message that said what to write.
func TestLoadRefusesStringThatIsNoDuration(t *testing.T) {
	for _, tc := range []struct{ env, value, yaml, key string }{
		{env: "COMBO_WINDOW_SIZE", value: "3", key: "window.size"},
		{env: "COMBO_WINDOW_GRACE", value: "3 s", key: "window.grace"},
		{env: "COMBO_REDIS_TIMEOUT", value: "fast", key: "redis.timeout"},
		{env: "COMBO_WORKER_BLOCK", value: "", key: "worker.block"},
		{yaml: "server:\n  shutdown_timeout: \"30\"\n", value: "30", key: "server.shutdown_timeout"},
	} {
		t.Run(tc.key, func(t *testing.T) {
			path := ""
			if tc.yaml != "" {
				path = filepath.Join(t.TempDir(), "combo.yaml")
				if err := os.WriteFile(path, []byte(tc.yaml), 0o600); err != nil {
					t.Fatal(err)
				}
			} else {
				t.Setenv(tc.env, tc.value)
			}
			_, err := Load(path)
			if err == nil {
				t.Fatalf("%q loaded, want it refused", tc.value)
			}
			for _, want := range []string{"'" + tc.key + "'", `want a Go duration string such as "500ms"`, fmt.Sprintf("got %q", tc.value)} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %s", err, want)
				}
			}
		})
	}
	// A valid one still reads.
	t.Setenv("COMBO_WINDOW_SIZE", "1500ms")
	if c, err := Load(""); err != nil || c.Window.Size != 1500*time.Millisecond {
		t.Fatalf("COMBO_WINDOW_SIZE=1500ms: %v, %v", c.Window.Size, err)
	}
}

// A YAML value that is no exact value of its key's type is refused,
// naming the key, not quietly changed (2.7 shards were 2).
func TestLoadRefusesInexactNumbers(t *testing.T) {
	for _, yaml := range []string{"redis:\n  shards: 2.7\n", "redis:\n  shards: 99999999999999999999\n",
		"metrics:\n  pprof: 7\n", "worker:\n  read_count: 1e100\n", "redis:\n  db: true\n",
		"redis:\n  password: 012345\n", "worker:\n  consumer: 1e3\n", "redis:\n  stream_maxlen: 18446744073709551615\n",
		"redis:\n  stream_maxlen: 9223372036854775808.0\n"} { // the last: 2^63, one past int64, as a float
		path := filepath.Join(t.TempDir(), "combo.yaml")
		if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		key := strings.Fields(strings.ReplaceAll(yaml, ":", " "))[1]
		// Refused when decoding, by what it is, not by a bound the value
		// happened to cross once quietly changed (2^64-1 became -1).
		if _, err := Load(path); err == nil || !strings.Contains(err.Error(), key) || !strings.Contains(err.Error(), "want ") {
			t.Errorf("%q: want an error naming %s and what it wants, got %v", yaml, key, err)
		}
	}
	path := filepath.Join(t.TempDir(), "combo.yaml")
	if err := os.WriteFile(path, []byte("redis:\n  shards: 4.0\n  password: \"012345\"\nmetrics:\n  pprof: true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("COMBO_WORKER_READ_COUNT", "64") // environment: strings, parsed
	t.Setenv("COMBO_REDIS_DB", "010")         // in base 10, not octal
	c, err := Load(path)
	if err != nil || c.Redis.Shards != 4 || c.Redis.Password != "012345" || !c.Metrics.Pprof || c.Worker.ReadCount != 64 || c.Redis.DB != 10 {
		t.Fatalf("exact values: %+v %v", c.Redis, err)
	}
	t.Setenv("COMBO_REDIS_DB", "")                      // empty is 0, as before
	t.Setenv("COMBO_REDIS_STREAM_MAXLEN", "20_000_000") // digits grouped as in Go
	if c, err := Load(path); err != nil || c.Redis.DB != 0 || c.Redis.StreamMaxLen != 20_000_000 {
		t.Fatalf("empty and grouped env integers: %+v %v", c.Redis, err)
	}
	for _, bad := range []string{"_", "1_", "_1", "1__0", "0x10", "1e3"} {
		t.Setenv("COMBO_REDIS_DB", bad)
		if _, err := Load(path); err == nil || !strings.Contains(err.Error(), "redis.db") {
			t.Errorf("COMBO_REDIS_DB=%s: want an error naming redis.db, got %v", bad, err)
		}
	}
	t.Setenv("COMBO_REDIS_DB", "ten")
	if _, err := Load(path); err == nil || !strings.Contains(err.Error(), "redis.db") {
		t.Fatalf("COMBO_REDIS_DB=ten: want an error naming redis.db, got %v", err)
	}
}

// A window allowed on its own never makes the defaults derived from it
// invalid: an operator who set only window.size (and window.stale) must
// not be told about keys they never set.
func TestDerivedDefaultsFollowTheWindow(t *testing.T) {
	for _, env := range [][2]string{{"58s", ""}, {"24h", "48h"}, {"10ms", ""}, {"59798ms", ""}} { // the last: stale = W + grace + 2ms
		t.Run(env[0], func(t *testing.T) {
			t.Setenv("COMBO_WINDOW_SIZE", env[0])
			if env[1] != "" {
				t.Setenv("COMBO_WINDOW_STALE", env[1])
			}
			c, err := Load("")
			if err != nil {
				t.Fatalf("window.size %s: %v", env[0], err)
			}
			open := c.Window.Size + c.Window.Grace
			if c.Worker.ClaimIdle <= open || c.Worker.ClaimIdle >= c.Window.Stale ||
				c.Worker.ConsumerIdleDelete < c.Worker.ClaimIdle {
				t.Fatalf("derived claim_idle %s, consumer_idle_delete %s for W + grace %s, stale %s",
					c.Worker.ClaimIdle, c.Worker.ConsumerIdleDelete, open, c.Window.Stale)
			}
		})
	}
	// window.stale must leave W + grace 2 ms, and the derived claim_idle is
	// whole ms strictly between them.
	t.Setenv("COMBO_WINDOW_STALE", "3201ms")
	if _, err := Load(""); err == nil || !strings.Contains(err.Error(), "window.stale") || strings.Contains(err.Error(), "worker.") {
		t.Fatalf("window.stale W + grace + 1ms: %v", err)
	}
	t.Setenv("COMBO_WINDOW_STALE", "3203ms")
	if c, err := Load(""); err != nil || c.Worker.ClaimIdle != 3201*time.Millisecond {
		t.Fatalf("window.stale W + grace + 3ms: claim_idle %s, %v", c.Worker.ClaimIdle, err)
	}
	os.Unsetenv("COMBO_WINDOW_STALE")
	// An invalid window.stale is named, and no key derived from it.
	t.Setenv("COMBO_WINDOW_SIZE", "24h")
	_, err := Load("")
	if err == nil || !strings.Contains(err.Error(), "window.stale") || strings.Contains(err.Error(), "worker.") {
		t.Fatalf("window.size 24h with the default window.stale: %v", err)
	}
	os.Unsetenv("COMBO_WINDOW_SIZE")
	c, err := Load("")
	if err != nil || c.Worker.ClaimIdle != 5200*time.Millisecond || c.Worker.ConsumerIdleDelete != 24*time.Hour {
		t.Fatalf("defaults: claim_idle %s, consumer_idle_delete %s, %v", c.Worker.ClaimIdle, c.Worker.ConsumerIdleDelete, err)
	}
	// consumer_idle_delete follows claim_idle as set, not as derived from
	// the window: a claim_idle set past a day must not make Load refuse
	// consumer_idle_delete, a key the operator never set.
	t.Setenv("COMBO_WINDOW_STALE", "48h")
	t.Setenv("COMBO_WORKER_CLAIM_IDLE", "30h")
	if c, err := Load(""); err != nil || c.Worker.ConsumerIdleDelete != 30*time.Hour {
		t.Fatalf("claim_idle 30h: consumer_idle_delete %s, %v; want 30h", c.Worker.ConsumerIdleDelete, err)
	}
}

// The file is YAML whatever its name ends with.
func TestLoadFileWithoutExtension(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config")
	if err := os.WriteFile(path, []byte("window:\n  size: 2s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(path)
	if err != nil || c.Window.Size != 2*time.Second {
		t.Fatalf("Load(%s) = %s, %v", path, c.Window.Size, err)
	}
}

func TestUnknownEnv(t *testing.T) {
	got := UnknownEnv([]string{"COMBO_REDIS_ADRESS=10.0.0.1:6379", "COMBO_REDIS_ADDR=x", "COMBO_CONFIG=/c.yaml",
		"COMBO_WORKER_CLAIM_IDLE=6s", "COMBO_REDIS_ADDRS=a:1,b:2", "PATH=/bin", "COMBO_LOG_LEVL=debug"})
	if strings.Join(got, ",") != "COMBO_LOG_LEVL,COMBO_REDIS_ADRESS" {
		t.Fatalf("UnknownEnv = %v, want the two misspelled names", got)
	}
}

func TestLoadMissingFile(t *testing.T) {
	if _, err := Load(filepath.Join(t.TempDir(), "nope.yaml")); err == nil {
		t.Fatal("a named config file that does not exist must be an error")
	}
}

func TestValidateNamesKey(t *testing.T) {
	cases := []struct {
		key    string
		mutate func(c *Config)
	}{
		{"server.addr", func(c *Config) { c.Server.Addr = "nonsense" }},
		{"server.shutdown_timeout", func(c *Config) { c.Server.ShutdownTimeout = -time.Second }},
		{"redis.addr", func(c *Config) { c.Redis.Addr = "redis" }},
		{"redis.addrs[1]", func(c *Config) { c.Redis.Addrs = []string{"10.0.0.1:7000", ""} }},
		{"redis.timeout", func(c *Config) { c.Redis.Timeout = 0 }},
		{"redis.shards", func(c *Config) { c.Redis.Shards = 0 }},
		{"redis.addrs", func(c *Config) { c.Redis.Addr, c.Redis.Addrs = "a:1", []string{"b:2"} }},
		// go-redis sends no AUTH without a password: the user would be ignored.
		{"redis.username", func(c *Config) { c.Redis.Username = "combo" }},
		{"window.size", func(c *Config) { c.Window.Size = 0 }},
		{"window.size", func(c *Config) { c.Window.Size = 25 * time.Hour }},
		{"window.grace", func(c *Config) { c.Window.Grace = -time.Millisecond }},
		// Whole milliseconds, each key named for itself.
		{"window.size", func(c *Config) { c.Window.Size = 3*time.Second + 500*time.Microsecond }},
		{"window.grace", func(c *Config) { c.Window.Grace = 200*time.Millisecond + 500*time.Microsecond }},
		{"server.max_connections", func(c *Config) { c.Server.MaxConnections = 0 }},
		{"server.max_connections", func(c *Config) { c.Server.MaxConnections = 1 << 32 }}, // Kitex keeps an int32
		{"window.dedupe", func(c *Config) { c.Window.Dedupe = 0 }},
		// Bounded so that sums and millisecond TTLs cannot overflow: a
		// grace of 2562047h made W + grace negative, passing every check.
		{"window.grace", func(c *Config) { c.Window.Grace = 2562047 * time.Hour }},
		{"window.dedupe", func(c *Config) { c.Window.Dedupe = 721 * time.Hour }},
		{"window.stale", func(c *Config) { c.Window.Stale = 721 * time.Hour }},
		// go-redis panicked past 2^31-1 connections.
		{"redis.pool_size", func(c *Config) { c.Redis.PoolSize = 3_000_000_000 }},
		{"redis.conn_max_lifetime", func(c *Config) { c.Redis.ConnMaxLifetime = -time.Second }},
		{"redis.conn_max_lifetime", func(c *Config) { c.Redis.ConnMaxLifetime = time.Millisecond }},
		{"redis.conn_max_lifetime", func(c *Config) { c.Redis.ConnMaxLifetime = 721 * time.Hour }},
		// Two listeners on one port failed at start, naming neither key.
		{"metrics.addr", func(c *Config) { c.Metrics.Addr = c.Server.Addr }},
		{"metrics.addr", func(c *Config) { c.Server.Addr, c.Metrics.Addr = "127.0.0.1:7000", ":7000" }},
		{"redis.embedded_addr", func(c *Config) { c.Redis.EmbeddedAddr = "127.0.0.1:8888" }},
		{"redis.embedded_addr", func(c *Config) { c.Metrics.Addr, c.Redis.EmbeddedAddr = "0.0.0.0:9300", "127.0.0.1:9300" }},
		{"window.stale", func(c *Config) { c.Window.Stale = c.Window.Size }},
		{"worker.consumer", func(c *Config) { c.Worker.Consumer = " " }},
		{"worker.claim_idle", func(c *Config) { c.Worker.ClaimIdle = c.Window.Size + c.Window.Grace }},
		// Sent in whole milliseconds: 3200.5ms would be 3200, W + grace.
		{"worker.claim_idle", func(c *Config) { c.Worker.ClaimIdle = c.Window.Size + c.Window.Grace + 500*time.Microsecond }},
		{"worker.block", func(c *Config) { c.Worker.Block = 0 }},
		// Sent in whole milliseconds: 500µs would be BLOCK 0, forever.
		{"worker.block", func(c *Config) { c.Worker.Block = 500 * time.Microsecond }},
		{"worker.block", func(c *Config) { c.Worker.Block = 1500 * time.Microsecond }},
		// 2s + 2562047h wrapped negative: every read failed at once, the
		// replica ready and pushing nothing; and SIGTERM waited it out.
		{"worker.block", func(c *Config) { c.Worker.Block = 2562047 * time.Hour }},
		{"worker.block", func(c *Config) { c.Worker.Block = 31 * time.Second }},
		// A flush pipeline of a million windows outran redis.timeout.
		{"worker.batch_size", func(c *Config) { c.Worker.BatchSize = 4097 }},
		{"worker.read_count", func(c *Config) { c.Worker.ReadCount = 10_001 }},
		{"redis.timeout", func(c *Config) { c.Redis.Timeout = time.Microsecond }},
		{"redis.timeout", func(c *Config) { c.Redis.Timeout = time.Hour + time.Millisecond }},
		{"log.level", func(c *Config) { c.Log.Level = "loud" }},
		{"log.format", func(c *Config) { c.Log.Format = "xml" }},
	}
	for _, tc := range cases {
		t.Run(tc.key, func(t *testing.T) {
			c := Default()
			tc.mutate(&c)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.key+":") {
				t.Fatalf("want an error naming %s, got %v", tc.key, err)
			}
		})
	}
}

func TestWarnings(t *testing.T) {
	if ws := Default().Warnings(); len(ws) != 0 {
		t.Fatalf("defaults warn: %q", ws)
	}
	c := Default()
	c.Server.ShutdownTimeout = time.Second
	c.Window.Dedupe = 2 * time.Second // W + grace is 3.2s
	ws := c.Warnings()
	if len(ws) != 2 || !strings.HasPrefix(ws[0], "server.shutdown_timeout (1s)") || !strings.HasPrefix(ws[1], "window.dedupe (2s)") {
		t.Fatalf("want a warning naming each key, got %q", ws)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("a warned setting is still valid: %v", err)
	}
	c = Default()
	c.Worker.Block, c.Server.ShutdownTimeout = 10*time.Second, 12*time.Second // W + grace + block + timeout is 13.7s
	if ws := c.Warnings(); len(ws) != 1 || !strings.HasPrefix(ws[0], "server.shutdown_timeout (12s)") || !strings.Contains(ws[0], "worker.block") {
		t.Fatalf("want a warning naming worker.block, got %q", ws)
	}
	// The embedded Redis has no protected mode: reachable from elsewhere
	// without a password, it is warned of.
	for addr, want := range map[string]bool{"0.0.0.0:0": true, ":6390": true, "10.0.0.5:0": true,
		"127.0.0.1:0": false, "localhost:6390": false, "[::1]:0": false} {
		c = Default()
		c.Redis.EmbeddedAddr = addr
		ws := c.Warnings()
		if got := len(ws) == 1 && strings.HasPrefix(ws[0], "redis.embedded_addr ("+addr+")"); got != want || len(ws) > 1 {
			t.Errorf("redis.embedded_addr %s: warnings %q, want a warning %v", addr, ws, want)
		}
		c.Redis.Password = "s3cret"
		if ws := c.Warnings(); len(ws) != 0 {
			t.Errorf("redis.embedded_addr %s with a password: warnings %q", addr, ws)
		}
	}
	c = Default()
	c.Window.Dedupe = 20 * time.Second // above W + grace, below the Reporter's retries
	if ws := c.Warnings(); len(ws) != 1 || !strings.Contains(ws[0], "client.Reporter") {
		t.Fatalf("want a warning about the Reporter's retries, got %q", ws)
	}
	c = Default()
	c.Redis.PoolSize = c.Redis.Shards + 1 // a pool that cannot hold every shard's pipeline and a batch
	if ws := c.Warnings(); len(ws) != 1 || !strings.HasPrefix(ws[0], "redis.pool_size") {
		t.Fatalf("want a warning naming redis.pool_size, got %q", ws)
	}
	c.Redis.PoolSize = c.Redis.Shards + 2
	if ws := c.Warnings(); len(ws) != 0 {
		t.Fatalf("pool_size shards + 2 warns: %q", ws)
	}
	// The default pool, 10 per CPU, is checked as a set one is.
	c = Default()
	c.Redis.Shards = 10 * runtime.GOMAXPROCS(0)
	if ws := c.Warnings(); len(ws) != 1 || !strings.HasPrefix(ws[0], "redis.pool_size (0: 10 per CPU") {
		t.Fatalf("want a warning naming the default redis.pool_size, got %q", ws)
	}
	c.Redis.Shards -= 2
	if ws := c.Warnings(); len(ws) != 0 {
		t.Fatalf("a default pool of shards + 2 warns: %q", ws)
	}
	c.Redis.PoolSize = c.Redis.Shards + 1
	c.Redis.Addr, c.Redis.Addrs = "", []string{"10.0.0.1:7000", "10.0.0.2:7000", "10.0.0.3:7000"}
	if ws := c.Warnings(); len(ws) != 0 { // its masters share the shards
		t.Fatalf("a Cluster's pool_size warns: %q", ws)
	}
	// A window.stale a few ms past W + grace dropped a quarter of the
	// windows on an idle machine; redis.timeout 1ms failed dials; pprof
	// without metrics.addr is served nowhere.
	c = Default()
	c.Window.Stale = c.Window.Size + c.Window.Grace + 2*time.Millisecond
	c.Worker.ClaimIdle = c.Window.Size + c.Window.Grace + time.Millisecond
	c.Worker.ConsumerIdleDelete = time.Hour
	if ws := c.Warnings(); len(ws) != 1 || !strings.HasPrefix(ws[0], "window.stale (3.202s) leaves 2ms") {
		t.Fatalf("want a warning naming window.stale, got %q", ws)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("a warned window.stale is still valid: %v", err)
	}
	c.Window.Stale = c.Window.Size + c.Window.Grace + time.Second
	if ws := c.Warnings(); len(ws) != 0 {
		t.Fatalf("window.stale a second past W + grace warns: %q", ws)
	}
	for _, tc := range []struct {
		mutate func(c *Config)
		prefix string
	}{
		{func(c *Config) { c.Redis.Timeout = time.Millisecond }, "redis.timeout (1ms)"},
		{func(c *Config) { c.Redis.Timeout = 9 * time.Millisecond }, "redis.timeout (9ms)"}, // README: below 10ms
		{func(c *Config) { c.Metrics.Pprof, c.Metrics.Addr = true, "" }, "metrics.pprof is on but metrics.addr is empty"},
		// Beyond loopback, anyone reaching the port can profile and trace.
		{func(c *Config) { c.Metrics.Pprof = true }, "metrics.pprof is on and metrics.addr (:9100) is reachable beyond this machine"},
		{func(c *Config) { c.Metrics.Pprof, c.Metrics.Addr = true, "10.0.0.5:9100" }, "metrics.pprof is on and metrics.addr (10.0.0.5:9100)"},
		// The sum the drain warning checks saturates: a redis.timeout near
		// the largest Duration wrapped it negative, and the warning vanished.
		{func(c *Config) { c.Redis.Timeout = math.MaxInt64 }, "server.shutdown_timeout"},
	} {
		c = Default()
		tc.mutate(&c)
		if ws := c.Warnings(); len(ws) != 1 || !strings.HasPrefix(ws[0], tc.prefix) {
			t.Errorf("want one warning starting %q, got %q", tc.prefix, ws)
		}
	}
	c = Default()
	c.Metrics.Pprof, c.Metrics.Addr = true, "127.0.0.1:9100"
	if ws := c.Warnings(); len(ws) != 0 {
		t.Fatalf("pprof on a loopback metrics.addr warns: %q", ws)
	}
	c = Default()
	room := c.Window.Stale - c.Window.Size - c.Window.Grace
	c.Redis.ConnMaxLifetime = room * 10 / 11 // with its tenth of jitter, room
	if ws := c.Warnings(); len(ws) != 0 {
		t.Fatalf("conn_max_lifetime and its jitter within window.stale less W + grace warns: %q", ws)
	}
	c.Redis.ConnMaxLifetime = room // a connection may live a tenth more
	if ws := c.Warnings(); len(ws) != 1 || !strings.HasPrefix(ws[0], "redis.conn_max_lifetime") {
		t.Fatalf("want a warning naming redis.conn_max_lifetime, got %q", ws)
	}
}

// An address written as a URL or with userinfo is refused without
// repeating it, whatever form carries the password: one that SplitHostPort
// takes would otherwise be logged raw at start and in dial errors.
func TestAddressErrorsHideThePassword(t *testing.T) {
	for _, a := range []string{"redis://:s3cret@redis:6379", "s3cret@redis:6379", "[default:s3cret@redis]:6379",
		"redis:6379/0?password=s3cret", "user:s3cret@10.0.0.1:7000", "default:s3cret", "redis:6379,password=s3cret",
		"s3cret", "default:s3cret:6379", ":6379s3cret"} {
		c := Default()
		c.Redis.Addr = a
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), "redis.addr") || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("redis.addr %q: %v", a, err)
		}
		c = Default()
		c.Redis.Addrs = []string{"10.0.0.1:7000", a}
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "redis.addrs[1]") || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("redis.addrs %q: %v", a, err)
		}
	}
	for _, a := range []string{"redis:6379", "10.0.0.1:7000", "[::1]:6379", "[fe80::1%eth0]:6379", "redis.prod.example.com:6380"} {
		c := Default()
		c.Redis.Addr = a
		if err := c.Validate(); err != nil {
			t.Errorf("redis.addr %q refused: %v", a, err)
		}
	}
}

// A seed list written with spaces after its commas is read as meant, a
// space inside an address is refused naming its key, and the ACL user is
// read from COMBO_REDIS_USERNAME. Before, " b:6379" passed validation and
// failed only at the dial.
func TestRedisAddressesAndUser(t *testing.T) {
	t.Setenv("COMBO_REDIS_ADDRS", "a:6379, b:6379 ,c:6379")
	t.Setenv("COMBO_REDIS_USERNAME", "combo")
	t.Setenv("COMBO_REDIS_PASSWORD", "pw") // a user needs one (Validate)
	c, err := Load("")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"a:6379", "b:6379", "c:6379"}; !slices.Equal(c.Redis.Addrs, want) || c.Redis.Username != "combo" {
		t.Fatalf("addrs %q, username %q; want %q, combo", c.Redis.Addrs, c.Redis.Username, want)
	}
	for key, val := range map[string]string{"COMBO_REDIS_ADDRS": "a:6379,b :6379", "COMBO_REDIS_ADDR": " redis:6379"} {
		t.Run(key, func(t *testing.T) {
			t.Setenv("COMBO_REDIS_ADDRS", "")
			t.Setenv(key, val)
			_, err := Load("")
			if err == nil || !strings.Contains(err.Error(), "a space") {
				t.Errorf("%s=%q: %v; want a refusal naming the space", key, val, err)
			}
		})
	}
}

// A key written with no value is refused, naming it: viper kept its
// default, so "addr:" meant as "empty = off" left metrics on at :9100.
// An empty string is a value, and a section without keys is no key.
func TestLoadRefusesKeysWithoutValue(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "combo.yaml")
	yaml := "metrics:\n  addr:\nredis:\n  timeout: ~\n  password: \"\"\nworker:\n"
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(path)
	if err == nil {
		t.Fatal("Load accepted keys without a value")
	}
	for _, want := range []string{"metrics.addr: has no value (YAML null)", "redis.timeout: has no value"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Load: %v; want %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "password") || strings.Contains(err.Error(), "worker") {
		t.Errorf("Load: %v; an empty string is a value, and an empty section no key", err)
	}
	// An unknown key without a value is refused as unknown: asked for a
	// value, it was then refused for its name.
	if err := os.WriteFile(path, []byte("redis:\n  adress:\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path); err == nil || !strings.Contains(err.Error(), "redis.adress: no such key") || strings.Contains(err.Error(), "has no value") {
		t.Errorf("Load of an unknown key without a value: %v; want it refused as unknown, not asked for a value", err)
	}
	// Keys are read in any case: a known one without a value is asked for one.
	if err := os.WriteFile(path, []byte("Redis:\n  Addr:\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path); err == nil || !strings.Contains(err.Error(), "has no value") || strings.Contains(err.Error(), "no such key") {
		t.Errorf("Load of Redis.Addr without a value: %v; want it asked for a value", err)
	}
	yaml = "metrics:\n  addr: \"\"\n"
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(path)
	if err != nil || c.Metrics.Addr != "" {
		t.Fatalf("metrics.addr \"\": %q, %v; want metrics off", c.Metrics.Addr, err)
	}
}

// A password written in braces unquoted (password: {s3cret}) is YAML for a
// map whose key is the secret, with a null value. It is refused, but
// without naming that key (nor an alias's name, nor any other value the
// YAML reader quotes): the error goes to stderr, the container's log. It
// names the key, or the line.
func TestLoadDoesNotRepeatAMapWrittenForAPassword(t *testing.T) {
	path := filepath.Join(t.TempDir(), "combo.yaml")
	for yaml, want := range map[string]string{
		"redis:\n  addr: \"h:6379\"\n  password: {s3cret}\n":                "redis.password",
		"redis:\n  addr: \"h:6379\"\n  sentinel_password: {s3cret, more}\n": "redis.sentinel_password",
		"redis:\n  addr: \"h:6379\"\n  password:\n    s3cret:\n":            "redis.password",
		// mapstructure before 2.3.0 repeated a list's items in its error.
		"redis:\n  addr: \"h:6379\"\n  password: [s3cret, more]\n": "redis.password",
		// A leading '*' is YAML for an alias, which the YAML reader names
		// in its error ("unknown anchor 's3cret' referenced").
		"redis:\n  addr: \"h:6379\"\n  password: *s3cret\n": "unknown anchor",
		// Written one level too high, outside redis: (its indent
		// forgotten): no section, so a key no section has; its map's keys
		// were named as unknown keys below it, the secret with them.
		"password: {s3cret}\n":                               "password",
		"sentinel_password: {s3cret}\n":                      "sentinel_password",
		"redis:\npassword: {s3cret}\n":                       "password",
		"redis:\n  addr: \"h:6379\"\npassword:\n  s3cret:\n": "password",
		// A key that begins a section's name ("w" of window and worker)
		// is no section: its map's keys are not walked, nor named.
		"w: {s3cret}\n": "w: no such key",
	} {
		if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := Load(path)
		if err == nil || strings.Contains(err.Error(), "s3cret") || !strings.Contains(err.Error(), want) {
			t.Errorf("Load(%q): %v; want a refusal saying %q, without the value", yaml, err, want)
		}
	}
}

// An IPv6 address written unquoted (addr: [::1]:6379) starts a YAML flow
// list that the rest of the value breaks: the YAML reader's error named
// neither key nor value, and the line before the one at fault. It is
// refused naming the key (a list item by its list's key), as README says
// of an unquoted value that starts with '[' or '{'.
func TestLoadNamesTheKeyOfAnUnquotedBracketThatIsNoYAML(t *testing.T) {
	path := filepath.Join(t.TempDir(), "combo.yaml")
	const head = "server:\n  addr: \"127.0.0.1:8888\"\nredis:\n  db: 0\n"
	for yaml, want := range map[string]string{
		head + "  addr: [::1]:6379\n":                                        "redis.addr",
		head + "  addrs: [[::1]:7000, [::1]:7001]\n":                         "redis.addrs",
		head + "  addrs:\n    - \"[::1]:7000\"\n    - [::1]:7001\n":          "redis.addrs",
		head + "  password: {s3cret}x\n":                                     "redis.password",
		"metrics:\n  addr: [::1]:9100 # the metrics port\nredis:\n  db: 0\n": "metrics.addr",
		"metrics:\n  addr: [::1]:9100 # see [docs\nredis:\n  db: 0\n":        "metrics.addr",
	} {
		if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := Load(path)
		if err == nil || !strings.Contains(err.Error(), want+": ") || !strings.Contains(err.Error(), "quote the value") ||
			strings.Contains(err.Error(), "s3cret") || strings.Contains(err.Error(), "::1") {
			t.Errorf("Load(%q): %v; want a refusal naming %s and saying to quote it, without the value", yaml, err, want)
		}
	}
	// A flow list over several lines, a list of aliases, or a block
	// scalar's text is no value to quote: when the file's fault is
	// elsewhere, the YAML reader's own words (and line) are kept, and no
	// key is blamed, nor any text of a block scalar named as one.
	for _, yaml := range []string{
		"redis:\n  addrs: [\"10.0.0.1:7000\",\n    \"10.0.0.2:7001\"]\n  db: 0\n timeout: 1s\n",
		"redis:\n  addrs: [\n    \"10.0.0.1:7000\",\n  ]\n  password: \"a\n",
		"redis:\n  addr: &a \"10.0.0.1:7000\"\n  addrs: [*a]\n timeout: 1s\n",
		"redis:\n  password: |\n    s3cret: [x\n  db: 0\n timeout: 1s\n",
	} {
		if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := Load(path)
		if err == nil || strings.Contains(err.Error(), "quote the value") || !strings.Contains(err.Error(), "yaml: line") ||
			strings.Contains(err.Error(), "s3cret") {
			t.Errorf("Load(%q): %v; want the YAML reader's refusal, naming no key to quote", yaml, err)
		}
	}
	// A key twice in a flow map beside a fault elsewhere: the reader's
	// error, which quotes the key (here the password), is given elided.
	for _, yaml := range []string{
		"redis:\n  password: {s3cret, s3cret}\n timeout: 1s\n",
		"redis:\n  password: {[s3cret]}\n timeout: 1s\n",
	} {
		if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := Load(path); err == nil || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("Load(%q): %v; want a refusal without the value", yaml, err)
		}
	}
	// A key written twice is still named: it is no value.
	if err := os.WriteFile(path, []byte("redis:\n  password: {s3cret, s3cret}\n  db: 0\n  db: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path); err == nil || !strings.Contains(err.Error(), `mapping key "db" already defined`) {
		t.Errorf("Load of db written twice: %v; want the key named", err)
	}
	// Two bad items of one list name it once; a bad value beside a block
	// scalar is still named.
	for yaml, want := range map[string]string{
		head + "  addrs:\n    - [::1]:7000\n    - [::1]:7001\n":       "read " + path + ": redis.addrs: an unquoted",
		"redis:\n  password: |\n    s3cret: [x\n  addr: [::1]:6379\n": "read " + path + ": redis.addr: an unquoted",
		// A valid flow list over several lines does not hide one beside it.
		"redis:\n  addrs: [\n    \"10.0.0.1:7000\",\n  ]\n  addr: [::1]:6379\n": "read " + path + ": redis.addr: an unquoted",
		// A key twice in a flow map fails only as viper reads the file
		// (into a map), with the key quoted in the reader's error.
		"redis:\n  password: {s3cret, s3cret}\n":       "read " + path + ": redis.password: an unquoted",
		"redis:\n  password: {s3cret: 1, s3cret: 2}\n": "read " + path + ": redis.password: an unquoted",
		"redis:\n  password: {[s3cret]}\n":             "read " + path + ": redis.password: an unquoted",
	} {
		if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := Load(path); err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("Load(%q): %v; want %q, without the value", yaml, err, want)
		}
	}
}

// An IPv6 Redis address written without its brackets, or with no port
// after them, is refused saying so: "got no host:port" left the operator
// to guess which. The value is not repeated (it may hold a password).
func TestValidateSaysHowAnIPv6AddressIsWritten(t *testing.T) {
	for addr, want := range map[string]string{
		"::1:6379":              "got more than one ':' outside brackets: an IPv6 address goes in brackets, [::1]:6379",
		"fe80::1:6379":          "got more than one ':' outside brackets: an IPv6 address goes in brackets, [::1]:6379",
		"[::1]":                 "got no port after the brackets",
		"[fe80::1%eth0]":        "got no port after the brackets",
		"redis.internal:":       "got a port that is no number 1..65535",
		"[::1]:6379:6379":       "got no host:port",
		"::1":                   "got more than one ':' outside brackets: an IPv6 address goes in brackets, [::1]:6379",
		"fe80::1%eth0:6379":     "got more than one ':' outside brackets: an IPv6 address goes in brackets, [::1]:6379",
		"fe80::1%eth0":          "got more than one ':' outside brackets: an IPv6 address goes in brackets, [::1]:6379",
		"redis.internal:6379:0": "got no host:port",
		"10.0.0.1:6379:":        "got no host:port",
		"[::1]:6379]":           "got no host:port",
		"redis.internal":        "got no host:port",
		"10.0.0.1":              "got no host:port", // an IPv4 address: no bracket hint
		"[::1]:0":               "got a port that is no number 1..65535",
		"[::1]:6379":            "",
		"[fe80::1%eth0]:1":      "",
	} {
		c := Default()
		c.Redis.Addr = addr
		err := c.Validate()
		if want == "" {
			if err != nil {
				t.Errorf("redis.addr %q: %v, want it valid", addr, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), "redis.addr: must be host:port or empty (embedded Redis), "+want) ||
			!strings.Contains(err.Error(), "(the value is not repeated: it may hold a password, which goes in redis.password)") {
			t.Errorf("redis.addr %q: %v, want %q, saying the value is not repeated", addr, err, want)
		}
	}
}

// The environment wins over the file, a key the file leaves without a
// value too: a template that says "password:" and gets the secret from
// COMBO_REDIS_PASSWORD loads, as it did before nulls were refused. Without
// its variable, the same key is still refused.
func TestLoadTakesTheEnvironmentOverAKeyWithoutValue(t *testing.T) {
	path := filepath.Join(t.TempDir(), "combo.yaml")
	yaml := "redis:\n  addr: \"127.0.0.1:6379\"\n  password:\nmetrics:\n  addr:\n"
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("COMBO_REDIS_PASSWORD", "s3cret")
	t.Setenv("COMBO_METRICS_ADDR", "") // empty is a value: metrics off
	c, err := Load(path)
	if err != nil || c.Redis.Password != "s3cret" || c.Metrics.Addr != "" {
		t.Fatalf("Load: password %q, metrics.addr %q, %v; want the environment's", c.Redis.Password, c.Metrics.Addr, err)
	}
	os.Unsetenv("COMBO_METRICS_ADDR")
	if _, err := Load(path); err == nil || !strings.Contains(err.Error(), "metrics.addr: has no value") ||
		strings.Contains(err.Error(), "password") {
		t.Fatalf("Load without COMBO_METRICS_ADDR: %v; want metrics.addr alone refused", err)
	}
}

// The embedded Redis knows only the default user: with redis.username set
// and no Redis named, the service started on it and every command failed
// WRONGPASS, never ready. It is refused naming the key instead.
func TestEmbeddedRedisRefusesAUsername(t *testing.T) {
	c := Default()
	c.Redis.Username, c.Redis.Password = "combo", "pw"
	err := c.Validate()
	if err == nil || !strings.Contains(err.Error(), "redis.username") || !strings.Contains(err.Error(), "embedded") {
		t.Fatalf("redis.username on the embedded Redis: %v; want a refusal naming redis.username and the embedded Redis", err)
	}
	c.Redis.Username = "" // a password alone: the default user takes it
	if err := c.Validate(); err != nil {
		t.Fatalf("redis.password on the embedded Redis: %v", err)
	}
	c.Redis.Username, c.Redis.Addr = "combo", "redis:6379"
	if err := c.Validate(); err != nil {
		t.Fatalf("redis.username with redis.addr: %v", err)
	}
}

// A value written unquoted after '!' is a YAML tag, not text: "password:
// !s3cret" loaded as an empty password and "!s3cret rest" as "rest", so
// the service logged in with the wrong one and Redis answered NOAUTH or
// WRONGPASS with no word of why. A tag the file gives is refused, naming
// the key and not the value; quoted, the same text loads as it reads.
// Unquoted, a value starting with '&' names an anchor and loses it:
// "&x s3cret" loaded as "s3cret". An anchor nothing refers to is refused,
// naming the key and not the value; one an alias uses is YAML meant as
// YAML and loads.
func TestLoadRefusesAnAnchorNothingRefersTo(t *testing.T) {
	path := filepath.Join(t.TempDir(), "combo.yaml")
	for _, yaml := range []string{
		"redis:\n  addr: \"h:6379\"\n  password: &x s3cret\n",
		"redis:\n  addr: \"h:6379\"\n  sentinel_password: &s3cret rest\n",
	} {
		if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := Load(path)
		if err == nil || strings.Contains(err.Error(), "s3cret") || !strings.Contains(err.Error(), "password: a YAML anchor") {
			t.Errorf("Load(%q): %v; want a refusal naming the key's YAML anchor, without the value", yaml, err)
		}
	}
	for yaml, want := range map[string]string{
		"redis:\n  addr: \"h:6379\"\n  password: \"&x s3cret\"\n":                                                         "&x s3cret",
		"redis:\n  sentinel_addrs: \"s:26379\"\n  sentinel_master: m\n  password: &pw s3cret\n  sentinel_password: *pw\n": "s3cret",
	} {
		if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		if c, err := Load(path); err != nil || c.Redis.Password != want {
			t.Errorf("Load(%q): password %q, %v; want %q", yaml, c.Redis.Password, err, want)
		} else if strings.Contains(yaml, "*pw") && c.Redis.SentinelPassword != want {
			t.Errorf("Load(%q): sentinel_password %q, want the anchored %q", yaml, c.Redis.SentinelPassword, want)
		}
	}
}

func TestLoadRefusesAYAMLTagWhereAValueGoes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "combo.yaml")
	for _, yaml := range []string{
		"redis:\n  addr: \"h:6379\"\n  password: !s3cret\n",
		"redis:\n  addr: \"h:6379\"\n  password: !s3cret rest\n",
		"redis:\n  addr: \"h:6379\"\n  sentinel_password: !s3cret\n",
	} {
		if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := Load(path)
		if err == nil || strings.Contains(err.Error(), "s3cret") || !strings.Contains(err.Error(), "password: a YAML tag") {
			t.Errorf("Load(%q): %v; want a refusal naming the key's YAML tag, without the value", yaml, err)
		}
	}
	if err := os.WriteFile(path, []byte("redis:\n  addr: \"h:6379\"\n  password: \"!s3cret rest\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if c, err := Load(path); err != nil || c.Redis.Password != "!s3cret rest" {
		t.Fatalf("Load of a quoted \"!s3cret rest\": password %q, %v; want it as written", c.Redis.Password, err)
	}
}

// YAML reads a leading 0 as octal and 0x as hex, where the environment
// reads base 10: "db: 010" wrote into db 8 while COMBO_REDIS_DB=010 meant
// 10. Such a number is refused, naming the key; decimal, 10_000_000 and a
// quoted string pass.
func TestLoadRefusesAnIntegerInAnotherBase(t *testing.T) {
	path := filepath.Join(t.TempDir(), "combo.yaml")
	for _, yaml := range []string{"redis:\n  db: 010\n", "redis:\n  shards: 0x10\n", "redis:\n  shards: 0o10\n",
		"redis:\n  addr: \"h:6379\"\n  password: 012345\n"} {
		if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := Load(path)
		if err == nil || !strings.Contains(err.Error(), "in another base") || strings.Contains(err.Error(), "12345") {
			t.Errorf("Load(%q): %v; want a refusal naming the key, without the value", yaml, err)
		}
	}
	for yaml, check := range map[string]func(c Config) bool{
		"redis:\n  db: 10\n  shards: 8\n":                      func(c Config) bool { return c.Redis.DB == 10 && c.Redis.Shards == 8 },
		"redis:\n  stream_maxlen: 10_000_000\n":                func(c Config) bool { return c.Redis.StreamMaxLen == 10_000_000 },
		"redis:\n  db: 0\n":                                    func(c Config) bool { return c.Redis.DB == 0 },
		"redis:\n  addr: \"h:6379\"\n  password: \"012345\"\n": func(c Config) bool { return c.Redis.Password == "012345" },
	} {
		if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		if c, err := Load(path); err != nil || !check(c) {
			t.Errorf("Load(%q): %+v, %v; want it as written", yaml, c.Redis, err)
		}
	}
}

// viper reads keys in lower case: "addr" and "Addr" in one section are one
// key written twice, and one of them was silently lost (an empty Addr
// could switch a replica to the embedded Redis).
func TestLoadRefusesAKeyWrittenInTwoCases(t *testing.T) {
	path := filepath.Join(t.TempDir(), "combo.yaml")
	for _, yaml := range []string{
		"redis:\n  addr: \"10.0.0.1:6379\"\n  Addr: \"\"\n",
		"redis:\n  Addr: \"\"\n  addr: \"10.0.0.1:6379\"\n",
		"window:\n  size: 2s\nWindow:\n  size: 5s\n",
	} {
		if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := Load(path); err == nil || !strings.Contains(err.Error(), "written twice") {
			t.Errorf("Load(%q): %v; want a refusal of the key written twice", yaml, err)
		}
	}
}

// A listening address's port is a number 0..65535: ":99999" passed as
// host:port and failed only at listen, naming the value but not the key.
func TestValidateRefusesAPortOutOfRange(t *testing.T) {
	for key, mutate := range map[string]func(c *Config){
		"server.addr":         func(c *Config) { c.Server.Addr = ":99999" },
		"metrics.addr":        func(c *Config) { c.Metrics.Addr = ":-1" },
		"redis.embedded_addr": func(c *Config) { c.Redis.EmbeddedAddr = "127.0.0.1:99999" },
	} {
		c := Default()
		mutate(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), key+":") {
			t.Errorf("%s: want an error naming it, got %v", key, err)
		}
	}
	c := Default()
	c.Server.Addr, c.Metrics.Addr, c.Redis.EmbeddedAddr = ":0", "127.0.0.1:9100", "127.0.0.1:0"
	if err := c.Validate(); err != nil {
		t.Fatalf("ports 0 and 9100: %v", err)
	}
	// One port on two hosts is two listeners.
	c.Server.Addr, c.Metrics.Addr = "10.0.0.1:7000", "10.0.0.2:7000"
	if err := c.Validate(); err != nil {
		t.Fatalf("one port on two hosts: %v", err)
	}
	c.Server.Addr = ":0"
	c.Metrics.Addr = "localhost:" // as net.Listen takes it: any free port
	if err := c.Validate(); err != nil {
		t.Fatalf("an empty port: %v", err)
	}
	// A host is empty, an IP (v6 with its zone) or a name; userinfo, a
	// URL or a space passed and failed only at start, in a DNS lookup.
	for _, ok := range []string{"[::1]:0", "[fe80::1%eth0]:0", "my-host.example_1:0", "0.0.0.0:0"} {
		c = Default()
		c.Redis.EmbeddedAddr = ok
		if err := c.Validate(); err != nil {
			t.Errorf("redis.embedded_addr %q: %v", ok, err)
		}
	}
	for _, bad := range []string{"u:pw@127.0.0.1:0", "pw@host:0", "a b:0", "x/y:0", "héte:0"} {
		for key, mutate := range map[string]func(c *Config){
			"server.addr":         func(c *Config) { c.Server.Addr = bad },
			"metrics.addr":        func(c *Config) { c.Metrics.Addr = bad },
			"redis.embedded_addr": func(c *Config) { c.Redis.EmbeddedAddr = bad },
		} {
			c = Default()
			mutate(&c)
			if err := c.Validate(); err == nil || !strings.Contains(err.Error(), key+": must be host:port") {
				t.Errorf("%s %q: want a refusal naming it, got %v", key, bad, err)
			}
		}
	}
}

// A boolean is true or false, from the environment too: 1, t and TRUE
// were taken (strconv.ParseBool), though README says otherwise.
func TestLoadTakesOnlyTrueOrFalseForABoolean(t *testing.T) {
	for _, v := range []string{"1", "t", "TRUE", "yes", " true"} {
		t.Setenv("COMBO_METRICS_PPROF", v)
		if _, err := Load(""); err == nil || !strings.Contains(err.Error(), "metrics.pprof") {
			t.Errorf("COMBO_METRICS_PPROF=%q: %v; want a refusal naming metrics.pprof", v, err)
		}
	}
	for v, want := range map[string]bool{"true": true, "false": false} {
		t.Setenv("COMBO_METRICS_PPROF", v)
		if c, err := Load(""); err != nil || c.Metrics.Pprof != want {
			t.Errorf("COMBO_METRICS_PPROF=%s: %v, %v", v, c.Metrics.Pprof, err)
		}
	}
}

// An unquoted value starting with '*' is an alias; to no anchor, YAML
// refuses the file naming neither key nor line. The refusal names the key,
// never the value (it may be a password).
func TestLoadNamesTheKeyOfAnAliasToNoAnchor(t *testing.T) {
	path := filepath.Join(t.TempDir(), "combo.yaml")
	if err := os.WriteFile(path, []byte("server:\n  addr: \":8888\"\nredis:\n  addr: \"h:6379\"\n  password: *s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(path)
	if err == nil || !strings.Contains(err.Error(), "redis.password: a YAML alias") || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("Load: %v; want a refusal naming redis.password, without the value", err)
	}
	// In flow style the YAML reader's own error is what is left, with the
	// alias's name taken out of it.
	if err := os.WriteFile(path, []byte("redis: {addr: \"h:6379\", password: *s3cret}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path); err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("Load of a flow-style alias: %v; want a refusal without the value", err)
	}
	// Two unknown aliases in one list name it once.
	_, err = Load(writeConf(t, "redis:\n  addrs:\n    - *s3cret\n    - *other\n"))
	if err == nil || !strings.Contains(err.Error(), ": redis.addrs: a YAML alias") || strings.Count(err.Error(), "redis.addrs") != 1 || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("Load of two unknown aliases in a list: %v; want redis.addrs named once", err)
	}
}

// The -healthcheck probe reads metrics.addr alone: from the environment,
// else the file, else the default, whatever else the file holds now (a
// typo, a bare duration: Load refuses both).
func TestMetricsAddrReadsNothingElse(t *testing.T) {
	path := filepath.Join(t.TempDir(), "combo.yaml")
	write := func(body string) {
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("metrics:\n  addr: \"127.0.0.1:9200\"\nlog:\n  levle: debug\nwindow:\n  size: 1\n")
	if _, err := Load(path); err == nil {
		t.Fatal("Load took the edited file: the test proves nothing")
	}
	for _, tc := range []struct{ body, env, want string }{
		{"metrics:\n  addr: \"127.0.0.1:9200\"\nlog:\n  levle: debug\nwindow:\n  size: 1\n", "", "127.0.0.1:9200"},
		{"window:\n  size: 1\n", "", Default().Metrics.Addr},
		{"metrics:\n  addr: \"\"\n", "", ""},
		// viper reads keys in any case, and the service listens there.
		{"Metrics:\n  Addr: \"127.0.0.1:9201\"\n", "", "127.0.0.1:9201"},
		{"metrics:\n  addr: \"127.0.0.1:9200\"\n", ":9300", ":9300"}, // the environment last: it stays set
	} {
		write(tc.body)
		if tc.env != "" {
			t.Setenv("COMBO_METRICS_ADDR", tc.env)
		}
		if got, err := MetricsAddr(path); err != nil || got != tc.want {
			t.Errorf("MetricsAddr of %q (env %q): %q, %v; want %q", tc.body, tc.env, got, err, tc.want)
		}
	}
	if got, err := MetricsAddr(""); err != nil || got != ":9300" {
		t.Errorf("MetricsAddr with no file: %q, %v; want the environment's", got, err)
	}
	// Set empty, the variable turns metrics off over the file's address,
	// as Load reads it (TestLoadEmptyEnvIsAValue).
	write("metrics:\n  addr: \"127.0.0.1:9200\"\n")
	t.Setenv("COMBO_METRICS_ADDR", "")
	if got, err := MetricsAddr(path); err != nil || got != "" {
		t.Errorf("MetricsAddr with COMBO_METRICS_ADDR empty: %q, %v; want \"\" (off)", got, err)
	}
}

// Wherever Load takes a file, the probe reads the metrics.addr the service
// listens on: a probe of another port fails a live replica for good (or
// reports another process's health).
func TestMetricsAddrAgreesWithLoad(t *testing.T) {
	path := filepath.Join(t.TempDir(), "combo.yaml")
	for _, body := range []string{
		"metrics:\n  addr: \"127.0.0.1:9200\"\n",
		"metrics: {addr: \"127.0.0.1:9201\"}\n",
		"Metrics:\n  Addr: \"127.0.0.1:9202\"\n",
		"metrics.addr: \"127.0.0.1:9203\"\n", // dotted keys: viper reads them
		"Metrics.Addr: \"127.0.0.1:9204\"\nmetrics.pprof: true\n",
		"metrics:\n  pprof: true\n",
		"metrics:\n  addr: \"\"\n",
		"log:\n  level: debug\n",
		"# nothing but a comment\n",
	} {
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		c, err := Load(path)
		if err != nil {
			t.Errorf("Load of %q: %v", body, err)
			continue
		}
		if got, err := MetricsAddr(path); err != nil || got != c.Metrics.Addr {
			t.Errorf("MetricsAddr of %q: %q, %v; the service listens on %q", body, got, err, c.Metrics.Addr)
		}
	}
}

// A section left empty (its keys commented out, values coming from the
// environment) sets nothing: its COMBO_* variables still apply. viper took
// "redis:" for a key with a value and read the section from the defaults
// only, so COMBO_REDIS_ADDR was ignored and the service started on its
// embedded, volatile Redis.
func TestEmptySectionKeepsItsEnvironment(t *testing.T) {
	path := filepath.Join(t.TempDir(), "combo.yaml")
	yaml := "redis:\n  # addr: from COMBO_REDIS_ADDR\nworker:\nmetrics:\nWindow:\nlog:\n  level: debug\n"
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("COMBO_REDIS_ADDR", "10.0.0.1:6379")
	t.Setenv("COMBO_WORKER_CONSUMER", "replica-a")
	t.Setenv("COMBO_METRICS_ADDR", ":9200")
	t.Setenv("COMBO_WINDOW_SIZE", "5s")
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if c.Redis.Addr != "10.0.0.1:6379" || c.Worker.Consumer != "replica-a" || c.Metrics.Addr != ":9200" || c.Window.Size != 5*time.Second {
		t.Errorf("Load = redis.addr %q, worker.consumer %q, metrics.addr %q, window.size %v; want the environment's",
			c.Redis.Addr, c.Worker.Consumer, c.Metrics.Addr, c.Window.Size)
	}
	if c.Log.Level != "debug" || c.Redis.Timeout != Default().Redis.Timeout {
		t.Errorf("Load = log.level %q, redis.timeout %v; want the file's and the default", c.Log.Level, c.Redis.Timeout)
	}
	// An empty section shared through an anchor cannot be dropped (the
	// alias would point at nothing), and kept it hid both sections'
	// variables (worker.consumer and metrics.addr read as defaults): it is
	// refused, naming both.
	if err := os.WriteFile(path, []byte("worker: &e\nmetrics: *e\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if c, err := Load(path); err == nil || !strings.Contains(err.Error(), "worker, metrics:") {
		t.Errorf("an empty section with an anchor another uses: worker.consumer %q, metrics.addr %q, %v; want it refused, naming both",
			c.Worker.Consumer, c.Metrics.Addr, err)
	}
}

// A variable named after a section (COMBO_REDIS, a guess at
// COMBO_REDIS_ADDR) is refused, naming it: viper took the whole section
// from it, and Validate then refused keys the operator never set.
func TestLoadRefusesSectionVariable(t *testing.T) {
	for _, value := range []string{"10.0.0.1:6379", ""} { // set empty, it is set all the same
		t.Setenv("COMBO_REDIS", value)
		_, err := Load("")
		if err == nil {
			t.Fatalf("Load accepted COMBO_REDIS=%q", value)
		}
		if !strings.Contains(err.Error(), "COMBO_REDIS: names the section redis") || !strings.Contains(err.Error(), "COMBO_REDIS_ADDR") {
			t.Errorf("Load with COMBO_REDIS=%q: %v; want COMBO_REDIS named as a section, pointing to COMBO_REDIS_ADDR", value, err)
		}
		if strings.Contains(err.Error(), "redis.timeout") {
			t.Errorf("Load with COMBO_REDIS=%q: %v; want no error about keys the operator never set", value, err)
		}
	}
}

// A window.size of a fraction of a millisecond is named alone: the default
// worker.claim_idle derived from it is no whole milliseconds either, and an
// error naming that key, which the operator never set, sends them to the
// wrong one.
func TestFractionalWindowIsNamedAlone(t *testing.T) {
	t.Setenv("COMBO_WINDOW_SIZE", "10500us")
	_, err := Load("")
	if err == nil || !strings.Contains(err.Error(), "window.size: must be whole milliseconds") {
		t.Fatalf("Load = %v, want window.size named", err)
	}
	if strings.Contains(err.Error(), "claim_idle") {
		t.Fatalf("Load = %v, names worker.claim_idle, which was not set", err)
	}
}

// The YAML reader's errors are given with what they quote of the file
// elided, double-quoted text too (a flow map's key, which in one written
// for a password is the password), but a section's or key's own name.
func TestWithoutYAMLValuesKeepsOnlyKeyNames(t *testing.T) {
	for in, want := range map[string]string{
		`line 3: mapping key "s3cret" already defined at line 3`:   `line 3: mapping key '…' already defined at line 3`,
		`invalid map key: []interface {}{"s3cret"}`:                `invalid map key: []interface {}{'…'}`,
		"unknown anchor 's3cret' referenced":                       "unknown anchor '…' referenced",
		"cannot unmarshal !!str `s3cret` into int":                 "cannot unmarshal !!str '…' into int",
		`line 4: mapping key "db" already defined at line 3`:       `line 4: mapping key "db" already defined at line 3`,
		`line 2: mapping key "s3c\"ret" already defined at line 2`: `line 2: mapping key '…' already defined at line 2`,
		`line 4: mapping key "redis" already defined at line 1`:    `line 4: mapping key "redis" already defined at line 1`,
	} {
		if got := withoutYAMLValues(errors.New(in)); got != want {
			t.Errorf("withoutYAMLValues(%q) = %q, want %q", in, got, want)
		}
	}
}
