package conf

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
)

// refuseNulls names each key the YAML file raw leaves without a value
// ("addr:" and nothing after it, or "~"). viper reads such a key as unset
// and keeps its default, so "metrics: {addr: }", written to turn metrics
// off as README's "empty = off" says, left them on at :9100. A key whose
// COMBO_* variable is set passes: the environment wins over the file, so
// its null changes nothing (a template's "password:" filled from a secret).
// A key the service does not know (known: "section.key", lower case) is
// named as unknown: asked for a value ("adress:"), it was then refused for
// its name; the decoder cannot name it itself, viper having dropped it as
// unset.
func refuseNulls(raw []byte, known map[string]bool) error {
	var doc map[string]any
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		// viper read the file first, so this is not expected; its values
		// are elided all the same, as Read elides viper's.
		return errors.New(withoutYAMLValues(err))
	}
	var keys, unknown, unnamed []string
	var walk func(prefix string, m map[string]any)
	walk = func(prefix string, m map[string]any) {
		for k, v := range m {
			key := prefix + k
			switch v := v.(type) {
			case nil:
				// A section left empty ("worker:") sets nothing.
				switch {
				case prefix == "":
				case !known[strings.ToLower(key)] && !plainKey.MatchString(k):
					// Not a key's name but a value run into one: in a
					// flow section, "password:s3cret" (no space after
					// the colon) or "password=s3cret" is one key with no
					// value. Named, the secret would be printed.
					unnamed = append(unnamed, strings.TrimSuffix(prefix, "."))
				case !known[strings.ToLower(key)]:
					unknown = append(unknown, key)
				case !envSet(key):
					keys = append(keys, key)
				}
			case map[string]any:
				// Only into sections: every key sits at section.key. A map
				// below that is a value of the wrong shape, which the
				// decoder refuses without repeating it; its keys may be a
				// secret, as in "password: {s3cret}" (YAML for a map). At
				// the top, only the service's own sections: a key written
				// one level too high ("password: {s3cret}" outside redis:)
				// is no section, and is named alone: its map's keys were
				// named as unknown keys below it, the password with them,
				// and unnamed, viper drops its null keys unseen.
				switch {
				case prefix != "":
				case isSection(known, key):
					walk(key+".", v)
				case plainKey.MatchString(k):
					unknown = append(unknown, key)
				default:
					unnamed = append(unnamed, "the file's top level")
				}
			}
		}
	}
	walk("", doc)
	sort.Strings(keys)
	sort.Strings(unknown)
	var errs []error
	for _, key := range keys {
		errs = append(errs, fmt.Errorf("%s: has no value (YAML null): give it one (\"\" for an empty string), or leave the key out for its default", key))
	}
	for _, key := range unknown {
		errs = append(errs, fmt.Errorf("%s: no such key (README's configuration table lists them)", key))
	}
	sort.Strings(unnamed)
	for _, section := range slices.Compact(unnamed) {
		errs = append(errs, fmt.Errorf("%s: holds a key that is no key's name (a value written without a space after its colon, as key:value, or with =?); not repeated, as it may be a secret", section))
	}
	return errors.Join(errs...)
}

// isSection reports whether name (any case) is a section of the known
// keys ("section.key").
func isSection(known map[string]bool, name string) bool {
	prefix := strings.ToLower(name) + "."
	for key := range known {
		if strings.HasPrefix(key, prefix) {
			return true
		}
	}
	return false
}

// plainKey is what a key's name may be: a misspelled one ("adress",
// "tls-ca-file") is named as unknown, anything else is not repeated.
var plainKey = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// withoutUnnamedKeys is the decoder's error err with the keys it names as
// invalid ("'redis' has invalid keys: adress, password:s3cret") that are
// no key's name elided, as refuseNulls does not repeat them: a key with
// a value after it ("password:s3cret: x") reaches the decoder.
func withoutUnnamedKeys(err error) string {
	return invalidKeys.ReplaceAllStringFunc(err.Error(), func(m string) string {
		head, list, _ := strings.Cut(m, ": ")
		keys := strings.Split(list, ", ")
		for i, k := range keys {
			if !plainKey.MatchString(k) {
				keys[i] = "'…' (no key's name: a value run into its key?)"
			}
		}
		return head + ": " + strings.Join(keys, ", ")
	})
}

var invalidKeys = regexp.MustCompile(`has invalid keys: [^\n]*`)

// envSet reports whether key's COMBO_* variable is set, empty included
// (Load's AllowEmptyEnv: "" is a value), as Load's viper names it.
func envSet(key string) bool {
	_, ok := os.LookupEnv("COMBO_" + strings.ToUpper(strings.ReplaceAll(key, ".", "_")))
	return ok
}

// withoutEmptySections is the YAML file raw without its sections left
// empty ("redis:" with every key commented out, a YAML null), and whether
// it dropped any. viper takes such a section for a key with a value: it
// stops registering that section's keys, and reads them from the defaults
// only, ignoring their COMBO_* variables, so a file trimmed to "redis:"
// with COMBO_REDIS_ADDR set started the service on its embedded, volatile
// Redis. Dropped, an empty section sets nothing, as it reads. Only the
// service's own sections (by viper's case-insensitive names) are dropped;
// an unknown one stays for UnmarshalExact to refuse.
func withoutEmptySections(raw []byte, sections map[string]bool) ([]byte, bool, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return nil, false, errors.New(withoutYAMLValues(err))
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return raw, false, nil
	}
	m := doc.Content[0]
	kept := m.Content[:0:0]
	dropped := false
	var shared []string
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		if !sections[strings.ToLower(k.Value)] {
			kept = append(kept, k, v)
			continue
		}
		// An empty section that anchors a null ("worker: &e") or is an
		// alias to one ("metrics: *e") cannot be dropped (the alias would
		// point at nothing), and kept it hides its variables as above.
		if (isNull(v) && v.Anchor != "") || (v.Kind == yaml.AliasNode && v.Alias != nil && isNull(v.Alias)) {
			shared = append(shared, k.Value)
		}
		if isNull(v) && v.Anchor == "" {
			dropped = true
			continue
		}
		kept = append(kept, k, v)
	}
	if len(shared) > 0 {
		return nil, false, fmt.Errorf("%s: an empty section shared through a YAML anchor or alias hides its COMBO_* variables: leave it out, or write its keys", strings.Join(shared, ", "))
	}
	if !dropped {
		return raw, false, nil
	}
	m.Content = kept
	out, err := yaml.Marshal(&doc)
	if err != nil {
		return nil, false, err
	}
	return out, true, nil
}

// isNull tells whether n is a YAML null ("worker:" with nothing after it, "~").
func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.Tag == "!!null" }

// refuseSectionVariables names each COMBO_* variable set under a section's
// own name (COMBO_REDIS=host:6379, a guess at COMBO_REDIS_ADDR): viper
// then takes the whole section from that one string, hiding every other
// COMBO_REDIS_* variable and the file's redis keys, and Validate's errors
// named keys the operator never set. defaults is Load's map of sections
// to their keys.
func refuseSectionVariables(defaults map[string]any) error {
	var names []string
	for s := range defaults {
		if _, ok := os.LookupEnv("COMBO_" + strings.ToUpper(s)); ok {
			names = append(names, s)
		}
	}
	sort.Strings(names)
	var errs []error
	for _, s := range names {
		var keys []string
		for k := range defaults[s].(map[string]any) {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		errs = append(errs, fmt.Errorf("COMBO_%s: names the section %s, not one of its keys; unset it, and set each key as COMBO_%s_<KEY> (e.g. COMBO_%s_%s)",
			strings.ToUpper(s), s, strings.ToUpper(s), strings.ToUpper(s), strings.ToUpper(keys[0])))
	}
	return errors.Join(errs...)
}
