package conf

import (
	"errors"
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"
)

// refuseTags names each key of the YAML file raw whose value YAML's own
// syntax would silently cut short, and which no key of the contract
// needs:
//   - a local tag. Unquoted, a value starting with '!' is a tag, not text:
//     "password: !s3cret" loads as "" and "!s3cret rest" as "rest", so the
//     service logged in with a password nobody wrote and Redis answered
//     NOAUTH or WRONGPASS without a word of why.
//   - an anchor that no alias refers to. Unquoted, a value starting with
//     '&' names an anchor: "password: &x s3cret" loads as "s3cret". An
//     anchor that an alias uses (password: &pw …, then
//     sentinel_password: *pw) is YAML meant as YAML, and passes.
//
// The refusal names the key, never the tag or anchor, which may be part
// of a secret.
func refuseTags(raw []byte) error {
	var doc yaml.Node
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		// viper read the file first, so this is not expected; its values
		// are elided all the same, as Read elides viper's.
		return errors.New(withoutYAMLValues(err))
	}
	type anchor struct {
		key  string
		node *yaml.Node
	}
	var anchors []anchor
	used := map[*yaml.Node]bool{}
	var errs []error
	var walk func(key string, n *yaml.Node)
	walk = func(key string, n *yaml.Node) {
		name := key
		if name == "" {
			name = "the file"
		}
		if n.Style&yaml.TaggedStyle != 0 && strings.HasPrefix(n.Tag, "!") && !strings.HasPrefix(n.Tag, "!!") {
			errs = append(errs, fmt.Errorf("%s: a YAML tag (an unquoted value that starts with '!'): quote the value", name))
			return
		}
		if n.Anchor != "" {
			anchors = append(anchors, anchor{name, n})
		}
		if n.Kind == yaml.AliasNode {
			used[n.Alias] = true
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
	for _, a := range anchors {
		if !used[a.node] {
			errs = append(errs, fmt.Errorf("%s: a YAML anchor that nothing refers to (an unquoted value that starts with '&'): quote the value", a.key))
		}
	}
	return errors.Join(errs...)
}
