package conf

import (
	"errors"
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"
)

// refuseTags names each key of the YAML file raw whose value carries
// a local tag. Unquoted, a value starting with '!' is a tag, not text:
// "password: !s3cret" loads as "" and "!s3cret rest" as "rest", so the
// service logged in with a password nobody wrote and Redis answered
// NOAUTH or WRONGPASS without a word of why. No key of the contract takes
// a tag. The refusal names the key, never the tag, which may be a secret.
func refuseTags(raw []byte) error {
	var doc yaml.Node
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		// viper read the file first, so this is not expected; its values
		// are elided all the same, as Read elides viper's.
		return errors.New(withoutYAMLValues(err))
	}
	var errs []error
	var walk func(key string, n *yaml.Node)
	walk = func(key string, n *yaml.Node) {
		if n.Style&yaml.TaggedStyle != 0 && strings.HasPrefix(n.Tag, "!") && !strings.HasPrefix(n.Tag, "!!") {
			name := key
			if name == "" {
				name = "the file"
			}
			errs = append(errs, fmt.Errorf("%s: a YAML tag (an unquoted value that starts with '!'): quote the value", name))
			return
		}
		if n.Kind == yaml.MappingNode {
			for i := 0; i+1 < len(n.Content); i += 2 {
				k := n.Content[i].Value
				if key != "" {
					k = key + "." + k
				}
				walk(k, n.Content[i+1])
			}
			return
		}
		for _, c := range n.Content {
			walk(key, c)
		}
	}
	walk("", &doc)
	return errors.Join(errs...)
}
