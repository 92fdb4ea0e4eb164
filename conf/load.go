package conf

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/viper"
)

// Load reads the optional YAML file at path (empty: none) and the COMBO_*
// environment over Default(), and validates the result.
func Load(path string) (Config, error) {
	c, err := read(path)
	if err != nil {
		return Config{}, err
	}
	if err := c.Validate(); err != nil {
		return Config{}, fmt.Errorf("conf.Load: invalid configuration:\n%w", err)
	}
	return c, nil
}

// MetricsAddr is metrics.addr as the -healthcheck probe needs it: from
// COMBO_METRICS_ADDR if set, else from the file at path (empty: none),
// else the default. It reads nothing else, and refuses nothing else: the
// probe must not fail a live service over files it goes on without (a
// redis.tls_* rotation half done) or a configuration edited since it
// started, even one Load would refuse (a typo, a bare duration). A file
// gone, or no longer YAML, fails it: nothing then says where the metrics
// are (README says to replace the file whole).
func MetricsAddr(path string) (string, error) {
	if addr, ok := os.LookupEnv("COMBO_METRICS_ADDR"); ok {
		return addr, nil
	}
	if path == "" {
		return Default().Metrics.Addr, nil
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("conf.MetricsAddr: %w", err)
	}
	// Read by viper, as Load reads it, so that the two cannot disagree:
	// keys in any case (Metrics: {Addr: ...}) and dotted keys
	// (metrics.addr: ...) alike.
	v := viper.New()
	v.SetConfigType("yaml")
	if err := v.ReadConfig(bytes.NewReader(raw)); err != nil {
		return "", fmt.Errorf("conf.MetricsAddr: read %s: %s", path, withoutYAMLValues(err))
	}
	switch addr := v.Get("metrics.addr").(type) {
	case string:
		return addr, nil
	case nil:
		return Default().Metrics.Addr, nil
	default:
		return "", fmt.Errorf("conf.MetricsAddr: read %s: metrics.addr is no string", path)
	}
}

// read is Load without Validate.
func read(path string) (Config, error) {
	v := viper.New()
	v.SetEnvPrefix("COMBO")
	v.SetEnvKeyReplacer(strings.NewReplacer(".", "_"))
	v.AutomaticEnv()
	// A variable set to "" is a value, not an absence: COMBO_METRICS_ADDR=
	// turns metrics off and COMBO_REDIS_ADDR= selects the embedded Redis,
	// even over a file that sets them (README's table says "empty = ...").
	v.AllowEmptyEnv(true)
	// AutomaticEnv only answers keys viper knows: register every key with
	// its default so COMBO_WINDOW_SIZE and friends are seen without a file.
	var defaults map[string]any
	if err := mapstructure.Decode(Default(), &defaults); err != nil {
		return Config{}, fmt.Errorf("conf.Load: %w", err)
	}
	// claim_idle's and consumer_idle_delete's defaults follow the window
	// actually configured, so they are registered as 0 ("derive") and
	// filled in after decoding.
	defaults["worker"].(map[string]any)["claim_idle"] = time.Duration(0)
	defaults["worker"].(map[string]any)["consumer_idle_delete"] = time.Duration(0)
	for key, val := range flatten("", defaults) {
		v.SetDefault(key, val)
	}
	if path != "" {
		v.SetConfigFile(path)
		// YAML whatever the file's name: /etc/combo/config has no extension
		// to tell viper, and the contract's file is YAML.
		v.SetConfigType("yaml")
		if err := v.ReadInConfig(); err != nil {
			if keys := unknownAliasKeys(path, err); keys != "" {
				return Config{}, fmt.Errorf("conf.Load: read %s: %s: a YAML alias to an unknown anchor (an unquoted value, or an item of a '[' or '{' value, that starts with '*'): quote it", path, keys)
			}
			// A '[' or '{' value holding an unknown alias is a list or a
			// map all the same: not what the next check names.
			if !strings.Contains(err.Error(), "unknown anchor") {
				if keys := unquotedFlowKeys(path); keys != "" {
					return Config{}, fmt.Errorf("conf.Load: read %s: %s: an unquoted value that starts with '[' or '{' (YAML's start of a list or a map) and is neither: quote the value", path, keys)
				}
			}
			return Config{}, fmt.Errorf("conf.Load: read %s: %s", path, withoutYAMLValues(err))
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			return Config{}, fmt.Errorf("conf.Load: read %s: %w", path, err)
		}
		known := map[string]bool{}
		for key := range flatten("", defaults) {
			known[key] = true
		}
		if err := errors.Join(refuseMoreDocuments(raw), refuseNulls(raw, known), refuseMisreadYAML(raw)); err != nil {
			return Config{}, fmt.Errorf("conf.Load: invalid configuration:\n%w", err)
		}
		sections := map[string]bool{}
		for s := range defaults {
			sections[s] = true
		}
		cleaned, dropped, err := withoutEmptySections(raw, sections)
		if err != nil {
			return Config{}, fmt.Errorf("conf.Load: read %s: %w", path, err)
		}
		if dropped {
			if err := v.ReadConfig(bytes.NewReader(cleaned)); err != nil {
				return Config{}, fmt.Errorf("conf.Load: read %s: %s", path, withoutYAMLValues(err))
			}
		}
	}
	if err := refuseSectionVariables(defaults); err != nil {
		return Config{}, fmt.Errorf("conf.Load: invalid configuration:\n%w", err)
	}
	var c Config
	hook := mapstructure.ComposeDecodeHookFunc(
		durationsAreStrings,
		numbersAreExact,
		mapstructure.StringToSliceHookFunc(","),
	)
	// Exact: a key the service does not know (a typo such as "adress") is an
	// error, not a silent default; a misspelled redis.addr would otherwise
	// start the service on its embedded, volatile Redis.
	if err := v.UnmarshalExact(&c, viper.DecodeHook(hook)); err != nil {
		return Config{}, fmt.Errorf("conf.Load: %s", withoutUnnamedKeys(err))
	}
	// A seed list written "a:6379, b:6379" is read as meant; a space
	// inside an address is still refused (checkHostPort).
	for i, a := range c.Redis.Addrs {
		c.Redis.Addrs[i] = strings.TrimSpace(a)
	}
	for i, a := range c.Redis.SentinelAddrs {
		c.Redis.SentinelAddrs[i] = strings.TrimSpace(a)
	}
	if c.Worker.ClaimIdle == 0 {
		c.Worker.ClaimIdle = DefaultClaimIdle(c.Window)
	}
	if c.Worker.ConsumerIdleDelete == 0 {
		c.Worker.ConsumerIdleDelete = defaultConsumerIdleDelete(c.Worker.ClaimIdle)
	}
	return c, nil
}

// yamlQuoted is what the YAML reader quotes of the file in its errors: an
// alias's name ("unknown anchor 'x' referenced"), values ("cannot
// unmarshal !!str `x` into ...") and keys, which in a flow map written
// for a password are the password ("mapping key \"x\" already defined",
// "invalid map key: []interface {}{\"x\"}"). A `quoted` value runs to the
// line's last backtick: the reader does not escape one inside it (a
// password file given as COMBO_CONFIG, "ab`s3cret", left "s3cret" out of
// the elision).
var yamlQuoted = regexp.MustCompile("'[^'\n]*'|`[^\n]*`|\"(?:[^\"\\\\\n]|\\\\.)*\"")

// withoutYAMLValues is err's message with what it quotes of the file
// elided: the value may be a password (password: *s3cret, unquoted, is an
// alias), and a refusal is printed. Line numbers and key names stay.
func withoutYAMLValues(err error) string {
	names := keyNames()
	return yamlQuoted.ReplaceAllStringFunc(err.Error(), func(q string) string {
		// A section's or key's own name stays: "mapping key \"db\"
		// already defined" says which key was written twice.
		if q[0] == '"' && names[q[1:len(q)-1]] {
			return q
		}
		return "'…'"
	})
}

// keyNames is every section's and key's name (redis, db, ...).
func keyNames() map[string]bool {
	var defaults map[string]any
	names := map[string]bool{}
	if err := mapstructure.Decode(Default(), &defaults); err != nil {
		return names
	}
	for key := range flatten("", defaults) {
		section, name, _ := strings.Cut(key, ".")
		names[section], names[name] = true, true
	}
	return names
}

var durationType = reflect.TypeFor[time.Duration]()

// durationsAreStrings refuses anything but a string where a duration goes
// (timeout: 500, or true, in YAML): viper's weak decoding would read a
// number as nanoseconds and true as 1ns. Durations are Go duration
// strings ("500ms"); the defaults are time.Duration values and pass.
// A string is parsed here, so that one that is no duration
// (COMBO_WINDOW_SIZE=3) is refused saying what it got and what is wanted,
// not with time.ParseDuration's bare "missing unit in duration".
func durationsAreStrings(from, to reflect.Type, data any) (any, error) {
	if to != durationType || from == durationType {
		return data, nil
	}
	if from.Kind() == reflect.String {
		s := reflect.ValueOf(data).String()
		d, err := time.ParseDuration(s)
		if err != nil {
			return nil, fmt.Errorf("want a Go duration string such as \"500ms\" or \"3s\" (a number and a unit: ns, us, ms, s, m, h), got %q", s)
		}
		return d, nil
	}
	return nil, fmt.Errorf("want a Go duration string such as \"500ms\", got %v (%s)", data, from.Kind())
}

// envInteger is a base-10 integer, '_' allowed only between digits.
var envInteger = regexp.MustCompile(`^[+-]?[0-9]+(_[0-9]+)*$`)

// numbersAreExact refuses a value that viper's weak decoding would quietly
// change:
//   - a fraction or an out-of-range number where an integer goes (shards:
//     2.7 became 2, and 1e20 a negative number), or a boolean (db: true
//     became 1);
//   - a number where a boolean goes (pprof: 7 became true), or an empty
//     string (COMBO_REDIS_TLS= turned TLS off);
//   - a YAML number or boolean where a string goes: YAML reads
//     password: 012345 as the octal number 5349 and 1.10 as 1.1, so such a
//     value must be quoted.
//
// Environment variables are strings: a boolean must read true or false
// (the weak decoding also took "", 1, t and TRUE), strings pass as before,
// and an integer is read in base 10 (the weak decoding read 010 as octal).
func numbersAreExact(from, to reflect.Type, data any) (any, error) {
	switch to.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if to == durationType {
			return data, nil // durationsAreStrings
		}
		switch v := data.(type) {
		case bool:
			return nil, fmt.Errorf("want a whole number, got %v", v)
		case float64:
			lo, hi := math.Ldexp(-1, to.Bits()-1), math.Ldexp(1, to.Bits()-1)
			if v != math.Trunc(v) || v < lo || v >= hi {
				return nil, fmt.Errorf("want a whole number, got %v", v)
			}
		case uint64:
			if v > math.MaxInt64>>(64-to.Bits()) {
				return nil, fmt.Errorf("want a whole number up to %d, got %d", uint64(math.MaxInt64>>(64-to.Bits())), v)
			}
		case string:
			// Empty is 0, as the weak decoding read it (pool_size 0 is the
			// go-redis default); 10_000_000 reads as in Go and YAML.
			t := strings.TrimSpace(v)
			if t == "" {
				return int64(0), nil
			}
			if !envInteger.MatchString(t) {
				return nil, fmt.Errorf("want a whole number, got %q", v)
			}
			n, err := strconv.ParseInt(strings.ReplaceAll(t, "_", ""), 10, to.Bits())
			if err != nil {
				return nil, fmt.Errorf("want a whole number, got %q", v)
			}
			return n, nil
		}
	case reflect.Bool:
		switch from.Kind() {
		case reflect.Bool:
		case reflect.String:
			// The weak decoding reads "" as false: COMBO_REDIS_TLS= (a
			// template's unset variable) turned off a file's tls: true
			// and dialed plain TCP, the password in clear. Empty is no
			// choice; " true" and "yes" are refused by the decoder. So are
			// 1, t and TRUE, which it took (strconv.ParseBool): README
			// says a boolean is true or false, as YAML's is.
			if v := data.(string); v != "true" && v != "false" {
				return nil, fmt.Errorf("want true or false, got %q", v)
			}
		default:
			return nil, fmt.Errorf("want true or false, got %v (%s)", data, from.Kind())
		}
	case reflect.String:
		switch from.Kind() {
		case reflect.String:
		case reflect.Slice:
			// a list where a string goes: the decoder names that itself
		default:
			// The value is not repeated: the key may be a password.
			return nil, fmt.Errorf("want a string, got a YAML %s: quote it", from.Kind())
		}
	}
	return data, nil
}

// UnknownEnv names the COMBO_* variables of environ (os.Environ's form)
// that are no configuration key: a misspelled COMBO_REDIS_ADRESS would
// otherwise be ignored in silence, and the service start on its embedded
// Redis. Only a warning: an orchestrator may set variables of its own
// under the prefix (Kubernetes' COMBO_..._SERVICE_HOST for a Service
// named combo-...).
func UnknownEnv(environ []string) []string {
	known := map[string]bool{"COMBO_CONFIG": true}
	var defaults map[string]any
	if err := mapstructure.Decode(Default(), &defaults); err == nil {
		for key := range flatten("", defaults) {
			known["COMBO_"+strings.ToUpper(strings.ReplaceAll(key, ".", "_"))] = true
		}
	}
	var unknown []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "COMBO_") && !known[name] {
			unknown = append(unknown, name)
		}
	}
	sort.Strings(unknown)
	return unknown
}

func flatten(prefix string, m map[string]any) map[string]any {
	out := map[string]any{}
	for k, val := range m {
		key := k
		if prefix != "" {
			key = prefix + "." + k
		}
		if sub, ok := val.(map[string]any); ok {
			maps.Copy(out, flatten(key, sub))
			continue
		}
		out[key] = val
	}
	return out
}
