package conf

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writeConf writes body as a YAML file in a temporary directory.
func writeConf(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "combo.yaml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// The YAML reader's own words are elided on every path that prints them:
// a second document the reader refuses (viper reads only the first), an
// unknown alias in a list item (unknownAliasKeys names block keys only),
// and the -healthcheck probe's read of the file.
func TestYAMLErrorsNeverRepeatAnAliasName(t *testing.T) {
	for name, body := range map[string]string{
		"second document":    "redis:\n  addr: \"h:6379\"\n---\nredis:\n  password: *s3cret\n",
		"alias in list item": "redis:\n  addrs:\n    - \"h:7000\"\n    - *s3cret\n",
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Load(writeConf(t, body))
			if err == nil || strings.Contains(err.Error(), "s3cret") {
				t.Fatalf("Load: %v; want a refusal without the value", err)
			}
		})
	}
	t.Run("MetricsAddr", func(t *testing.T) {
		_, err := MetricsAddr(writeConf(t, "metrics:\n  addr: \":9100\"\nredis:\n  password: *s3cret\n"))
		if err == nil || strings.Contains(err.Error(), "s3cret") {
			t.Fatalf("MetricsAddr: %v; want a refusal without the value", err)
		}
	})
}

// README: a Sentinel username needs the Sentinel password; with both
// set the configuration is valid.
func TestSentinelUserWithPasswordIsValid(t *testing.T) {
	c := Default()
	c.Redis.SentinelAddrs, c.Redis.SentinelMaster = []string{"s1:26379"}, "combo"
	c.Redis.SentinelUsername, c.Redis.SentinelPassword = "watcher", "pw"
	if err := c.Validate(); err != nil {
		t.Fatalf("Validate() = %v, want nil", err)
	}
	// A Sentinel user alone, with no Sentinels, is set for nothing.
	c = Default()
	c.Redis.Addr, c.Redis.SentinelUsername = "redis.internal:6379", "watcher"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "redis.sentinel_addrs:") {
		t.Fatalf("Validate() = %v, want an error naming redis.sentinel_addrs", err)
	}
}

// Two listeners on the same port of one host, or one on "::" (every
// address) and one on an IPv4 address, cannot both start.
func TestListenersOnOneHostPortAreRefused(t *testing.T) {
	for _, tc := range []struct{ server, metrics string }{
		{"127.0.0.1:8888", "127.0.0.1:8888"},
		{"[::]:8888", "127.0.0.1:8888"},
		{"127.0.0.1:9100", "[::]:9100"},
	} {
		c := Default()
		c.Server.Addr, c.Metrics.Addr = tc.server, tc.metrics
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "metrics.addr: must not listen on server.addr's port") {
			t.Errorf("server.addr %q, metrics.addr %q: Validate() = %v", tc.server, tc.metrics, err)
		}
	}
}

// The upper edges README gives are valid; one past them is not.
func TestValidateAcceptsREADMEUpperEdges(t *testing.T) {
	for name, mutate := range map[string]func(c *Config){
		"dedupe 720h": func(c *Config) { c.Window.Dedupe = 720 * time.Hour },
		"stale 720h":  func(c *Config) { c.Window.Stale = 720 * time.Hour },
		"grace 24h": func(c *Config) {
			c.Window.Grace, c.Window.Stale, c.Worker.ClaimIdle, c.Worker.ConsumerIdleDelete = 24*time.Hour, 48*time.Hour, 30*time.Hour, 30*time.Hour
		},
		"read_count 10000": func(c *Config) { c.Worker.ReadCount = 10_000 },
		"batch_size 4096":  func(c *Config) { c.Worker.BatchSize = 4096 },
		"block 30s":        func(c *Config) { c.Worker.Block = 30 * time.Second },
	} {
		t.Run(name, func(t *testing.T) {
			c := Default()
			mutate(&c)
			if err := c.Validate(); err != nil {
				t.Fatal(err)
			}
		})
	}
	c := Default()
	c.Window.Grace, c.Window.Stale, c.Worker.ClaimIdle, c.Worker.ConsumerIdleDelete = 24*time.Hour+time.Millisecond, 48*time.Hour, 30*time.Hour, 30*time.Hour
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "window.grace:") {
		t.Fatalf("grace 24h1ms: Validate() = %v, want an error naming window.grace", err)
	}
}

// redis.addr's refusals say where a password goes (redis.password, not the
// Sentinels'), and each of ',' '=' and a control character alone is refused.
func TestRedisAddrRefusalsAlone(t *testing.T) {
	for _, a := range []string{"s3cret,redis.internal:6379", "password=s3cret:6379", "redis.internal\x01:6379"} {
		c := Default()
		c.Redis.Addr = a
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), "redis.addr: ") || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("redis.addr %q: Validate() = %v", a, err)
			continue
		}
		if !strings.Contains(err.Error(), "which goes in redis.password)") {
			t.Errorf("redis.addr %q: the hint does not name redis.password: %v", a, err)
		}
	}
}

// A refusal of refuseMisreadYAML names the key as section.key, at the
// start of its line, whatever the case the file writes it in.
func TestMisreadYAMLNamesSectionDotKey(t *testing.T) {
	_, err := Load(writeConf(t, "redis:\n  addr: \"h:6379\"\n  db: 010\n"))
	if err == nil || !strings.Contains("\n"+err.Error(), "\nredis.db: an integer YAML reads in another base") {
		t.Fatalf("Load: %v; want a line starting \"redis.db: \"", err)
	}
	_, err = Load(writeConf(t, "Redis:\n  Addr: [::1]:6379\n"))
	if err == nil || !strings.Contains(err.Error(), "Redis.Addr: an unquoted value that starts with '['") {
		t.Fatalf("Load: %v; want the '[' refusal naming Redis.Addr", err)
	}
}

// An anchor and its alias are YAML meant as YAML: when the file fails for
// another reason, the alias's key is not blamed as an unknown anchor.
func TestKnownAliasIsNotBlamedForAnotherFault(t *testing.T) {
	_, err := Load(writeConf(t, "redis:\n  password: &pw \"x\"\n  sentinel_password: *pw\n\taddr: \"h:6379\"\n"))
	if err == nil || strings.Contains(err.Error(), "unknown anchor") && strings.Contains(err.Error(), "sentinel_password") {
		t.Fatalf("Load: %v; want the reader's own error, not an unknown alias", err)
	}
}

// Of the file's aliases only the one to no anchor is named: every value
// starting with '*' was, sending the operator to a key that is fine. An
// unknown alias in a list item is named by its list's key; one in flow
// style names none (the reader's words, elided, stand).
func TestUnknownAliasNamesOnlyTheBrokenAlias(t *testing.T) {
	_, err := Load(writeConf(t, "redis:\n  password: &pw \"x\"\n  sentinel_password: *pw\n  addr: *nope\n"))
	if err == nil || !strings.Contains(err.Error(), "redis.addr") || strings.Contains(err.Error(), "redis.sentinel_password") {
		t.Fatalf("Load: %v; want redis.addr named alone", err)
	}
	_, err = Load(writeConf(t, "redis:\n  password: &pw \"x\"\n  addrs:\n    - *pw\n    - *nope\n"))
	if err == nil || !strings.Contains(err.Error(), "redis.addrs: a YAML alias to an unknown anchor") {
		t.Fatalf("Load: %v; want redis.addrs named", err)
	}
	// In a '[' or '{' value closed on its line, the value's key is named,
	// as an alias, not as a value that is no list or map.
	_, err = Load(writeConf(t, "redis:\n  password: &pw \"x\"\n  sentinel_password: *pw\n  tls: {ca_file: *nope}\n"))
	if err == nil || !strings.Contains(err.Error(), "redis.tls: a YAML alias to an unknown anchor") ||
		strings.Contains(err.Error(), "sentinel_password") || strings.Contains(err.Error(), "nope") {
		t.Fatalf("Load: %v; want redis.tls named as an unknown alias, alone", err)
	}
}

// An anchor defined in a '[' or '{' value that also holds a '*' (in a
// quote, a comment, or an alias) stays: quoting that value out blamed the
// valid aliases to it beside the one at fault. A '{' in a quote and a '#'
// inside a word are text, as YAML reads them: taken for an open bracket or
// a comment, the value was left out and nothing named.
func TestUnknownAliasBesideAFlowValueDefiningAnAnchor(t *testing.T) {
	for name, c := range map[string]struct{ body, want string }{
		"a '*' in the comment": {"redis:\n  sentinel_addrs: [&s1 \"10.0.0.1:26379\", \"10.0.0.2:26379\"] # * = primary site\n" +
			"  sentinel_master: combo\n  sentinel_username: [*s1]\n  password: *S3CRETpw\n", "redis.password: "},
		"a list item": {"redis:\n  addrs:\n    - [&n1 \"10.0.0.1:7000\"] # *\n    - *n1\n  password: *S3CRETpw\n", "redis.password: "},
		// a '&' inside a plain word is no anchor: the value is still checked
		"a plain a&b": {"redis:\n  addrs: [a&b, *S3CRET]\n", "redis.addrs: "},
		// a '*' outside quotes too: the value that defines the anchor stays
		// as written, so the valid alias to it is not blamed
		"an alias beside its anchor": {"redis:\n  addrs: [&n1 \"10.0.0.1:7000\", *n1]\n  sentinel_username: [*n1]\n" +
			"  password: *S3CRETpw\n", "redis.password: "},
		// a '{' in a quote, a '#' inside a plain word: no bracket left open,
		// no comment, so the flow map is one value, named by its section
		"a '{' in a quote": {"redis: {addr: \"h:6379\", password: \"p{w\", sentinel_password: *S3CRET}\n", "redis: "},
		"a '#' in a word":  {"redis: {addr: \"h:6379\", password: p#w, sentinel_password: *S3CRET}\n", "redis: "},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Load(writeConf(t, c.body))
			if err == nil || !strings.Contains(err.Error(), c.want+"a YAML alias to an unknown anchor") || strings.Contains(err.Error(), "S3CRET") {
				t.Fatalf("Load: %v; want %q alone named", err, c.want)
			}
			for _, valid := range []string{"sentinel_username", "redis.addrs"} {
				if strings.Contains(err.Error(), valid) && !strings.HasPrefix(c.want, valid) {
					t.Fatalf("Load: %v; names the valid %s", err, valid)
				}
			}
		})
	}
}

// Where quoting the file's aliases does not make it clean, none is named
// and the reader's words, elided, stand: a flow map over several lines
// (quoting a line cut its trailing ',' and blamed the valid alias kept), a
// quoted password over several lines, one of whose lines reads like a key
// (it was named, a piece of the password).
func TestUnknownAliasNamesNoneWhereQuotingBreaksTheFile(t *testing.T) {
	for name, body := range map[string]string{
		"flow map over lines": "redis: {\n  sentinel_master: &pw \"m\",\n  sentinel_password: *pw,\n  tls_ca_file: {a: *nope}\n}\n",
		"flow map, one line":  "redis: {sentinel_password: &pw \"x\",\n  password: *pw, addr: *nope}\n",
		"password over lines": "redis:\n  password: \"p\n    hunter2s3cret: *x\"\n  tls_ca_file: {a: *nope}\n",
		"password, single '":  "redis:\n  password: 'p\n    hunter2s3cret: *x'\n  tls_ca_file: {a: *nope}\n",
		// an unknown alias in a '[' value that defines an anchor: a list all
		// the same, not one to call no list or map
		"flow list with an anchor": "redis:\n  addrs: [&a \"h:1\", *nope]\n",
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Load(writeConf(t, body))
			if err == nil {
				t.Fatal("Load took the file")
			}
			for _, leak := range []string{"hunter2s3cret", "nope", "sentinel_password", "redis.password", "a YAML alias", "is neither"} {
				if strings.Contains(err.Error(), leak) {
					t.Errorf("Load: %v; names %q", err, leak)
				}
			}
		})
	}
}

// README: integers are written in base 10; db: 010, which YAML reads as
// octal 8, is refused. With an explicit !!int tag it was read as 8 (and
// 0x10 as 16) without a word.
func TestTaggedIntegerInAnotherBaseIsRefused(t *testing.T) {
	for _, v := range []string{"!!int 010", "!!int 0x10", "!!float 010", "!!float 0x10", "!!float 0o10", "!!float 0b11"} {
		c, err := Load(writeConf(t, "redis:\n  addr: \"h:6379\"\n  db: "+v+"\n"))
		if err == nil || !strings.Contains(err.Error(), "redis.db") {
			t.Errorf("db: %s: Load gave db %d, err %v; want a refusal naming redis.db", v, c.Redis.DB, err)
		}
	}
}

// Each warning is of a value below its bound: at the bound itself (README
// gives the bounds as "below" or "shorter than") none is logged.
func TestWarningsAtTheirBoundsAreNone(t *testing.T) {
	for name, mutate := range map[string]func(c *Config){
		"shutdown_timeout = W + grace + block + timeout": func(c *Config) {
			c.Server.ShutdownTimeout = c.Window.Size + c.Window.Grace + c.Worker.Block + c.Redis.Timeout
		},
		"stale = W + grace + 1s": func(c *Config) {
			c.Window.Stale = c.Window.Size + c.Window.Grace + minStaleMargin
			c.Worker.ClaimIdle = DefaultClaimIdle(c.Window)
		},
		// README's own figures ("below 10ms", "below 35 s"), not the
		// constants, which the cases would follow wherever they moved.
		"timeout = 10ms": func(c *Config) { c.Redis.Timeout = 10 * time.Millisecond },
		"dedupe = 35s":   func(c *Config) { c.Window.Dedupe = 35 * time.Second },
		// README: warned of when the lifetime and its tenth are longer than
		// window.stale less W + grace; here they are exactly that.
		"conn_max_lifetime and its tenth = stale less W + grace": func(c *Config) {
			room := c.Window.Stale - c.Window.Size - c.Window.Grace
			l := room * 10 / 11
			for l+l/10 < room {
				l++
			}
			if l+l/10 != room {
				panic("no lifetime whose tenth more is room exactly")
			}
			c.Redis.ConnMaxLifetime = l
		},
		"shutdown_timeout = W + grace + 1ms block + 10ms timeout": func(c *Config) {
			c.Worker.Block, c.Redis.Timeout = time.Millisecond, minSensibleTimeout
			c.Server.ShutdownTimeout = c.Window.Size + c.Window.Grace + c.Worker.Block + c.Redis.Timeout
		},
	} {
		t.Run(name, func(t *testing.T) {
			c := Default()
			mutate(&c)
			if err := c.Validate(); err != nil {
				t.Fatal(err)
			}
			if ws := c.Warnings(); len(ws) != 0 {
				t.Fatalf("warnings %q, want none", ws)
			}
		})
	}
	// server.shutdown_timeout = W + grace is not shorter than W + grace:
	// only the warning that names worker.block and redis.timeout applies.
	c := Default()
	c.Server.ShutdownTimeout = c.Window.Size + c.Window.Grace
	if ws := c.Warnings(); len(ws) != 1 || !strings.HasPrefix(ws[0], "server.shutdown_timeout (3.2s) is shorter than window.size + window.grace + worker.block") {
		t.Fatalf("shutdown_timeout = W + grace: warnings %q, want the one naming worker.block alone", ws)
	}
	c = Default()
	c.Window.Dedupe = c.Window.Size + c.Window.Grace // not shorter than W + grace: the retry horizon's warning only
	if ws := c.Warnings(); len(ws) != 1 || !strings.Contains(ws[0], "covers client.Reporter's default retries") {
		t.Fatalf("dedupe = W + grace: warnings %q, want the retry horizon's alone", ws)
	}
}

// A tagged number in base 10 is its value: the base check refuses only
// what YAML reads in another base.
func TestTaggedDecimalIsTaken(t *testing.T) {
	for v, want := range map[string]int{"!!int 10": 10, "!!float 10": 10, "!!int +3": 3, "!!float 0": 0} {
		c, err := Load(writeConf(t, "redis:\n  addr: \"h:6379\"\n  db: "+v+"\n"))
		if err != nil || c.Redis.DB != want {
			t.Errorf("db: %s: Load gave db %d, err %v; want %d", v, c.Redis.DB, err, want)
		}
	}
}

// A value that starts with a tag YAML does not define is refused like a
// local tag, naming the key: "!!s3cret x" and "!<s3cret> x" loaded as "x",
// a password nobody wrote. YAML's own tags still read.
func TestUnknownYAMLTagsAreRefused(t *testing.T) {
	for _, v := range []string{"!!S3CRET x", "!<S3CRET> x", "!S3CRET x", "! S3CRET", "!\tS3CRET", "!<!> S3CRET"} {
		_, err := Load(writeConf(t, "redis:\n  addr: \"h:6379\"\n  password: "+v+"\n"))
		if err == nil || !strings.Contains(err.Error(), "redis.password: a YAML tag") || strings.Contains(err.Error(), "S3CRET") {
			t.Errorf("password: %s: Load: %v; want redis.password named as a tag, the value not repeated", v, err)
		}
	}
	c, err := Load(writeConf(t, "redis:\n  addr: !!str \"h:6379\"\n  password: !<tag:yaml.org,2002:str> x\n"))
	if err != nil || c.Redis.Addr != "h:6379" || c.Redis.Password != "x" {
		t.Fatalf("YAML's own tags: %+v, %v", c.Redis, err)
	}
}
