package conf

import (
	"errors"
	"fmt"
	"os"
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
func refuseNulls(raw []byte) error {
	var doc map[string]any
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		// viper read the file first, so this is not expected; its values
		// are elided all the same, as Read elides viper's.
		return errors.New(withoutYAMLValues(err))
	}
	var keys []string
	var walk func(prefix string, m map[string]any)
	walk = func(prefix string, m map[string]any) {
		for k, v := range m {
			key := prefix + k
			switch v := v.(type) {
			case nil:
				// A section left empty ("worker:") sets nothing.
				if prefix != "" && !envSet(key) {
					keys = append(keys, key)
				}
			case map[string]any:
				// Only into sections: every key sits at section.key. A map
				// below that is a value of the wrong shape, which the
				// decoder refuses without repeating it; its keys may be a
				// secret, as in "password: {s3cret}" (YAML for a map).
				if prefix == "" {
					walk(key+".", v)
				}
			}
		}
	}
	walk("", doc)
	sort.Strings(keys)
	var errs []error
	for _, key := range keys {
		errs = append(errs, fmt.Errorf("%s: has no value (YAML null): give it one (\"\" for an empty string), or leave the key out for its default", key))
	}
	return errors.Join(errs...)
}

// envSet reports whether key's COMBO_* variable is set, empty included
// (Load's AllowEmptyEnv: "" is a value), as Load's viper names it.
func envSet(key string) bool {
	_, ok := os.LookupEnv("COMBO_" + strings.ToUpper(strings.ReplaceAll(key, ".", "_")))
	return ok
}
