package conf

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// refuseMisreadYAML names each key of the YAML file raw whose value YAML's own
// syntax would silently cut short, and which no key of the contract
// needs:
//   - a tag YAML does not define. Unquoted, a value starting with '!' is
//     a tag, not text: "password: !s3cret" loads as "" and "!s3cret rest"
//     (or "!!s3cret rest", "!<s3cret> rest", "! rest") as "rest", so the
//     service logged in with a password nobody wrote and Redis answered
//     NOAUTH or WRONGPASS without a word of why. YAML's own (!!str,
//     !!int, ...) read a value of their kind, and pass.
//   - an anchor that no alias refers to. Unquoted, a value starting with
//     '&' names an anchor: "password: &x s3cret" loads as "s3cret". An
//     anchor that an alias uses (password: &pw …, then
//     sentinel_password: *pw) is YAML meant as YAML, and passes.
//   - an integer written in another base: YAML reads "db: 010" as octal 8
//     (and 0x10 as 16; !!int and !!float tags too), where COMBO_REDIS_DB=010
//     is 10, so the service wrote into a db nobody wrote.
//   - one key written twice in two cases ("addr" and "Addr"): viper reads
//     keys in lower case and keeps one of the two, whichever it likes.
//
// The refusal names the key, never the tag, anchor or number, which may be
// part of a secret.
func refuseMisreadYAML(raw []byte) error {
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
		// Any tag but YAML's own: "!!s3cret x" and "!<s3cret> x" loaded
		// as "x" too.
		if n.Style&yaml.TaggedStyle != 0 && !yamlTags[n.ShortTag()] {
			errs = append(errs, fmt.Errorf("%s: a YAML tag (an unquoted value that starts with '!'): quote the value", name))
			return
		}
		if n.Anchor != "" {
			anchors = append(anchors, anchor{name, n})
		}
		if n.Kind == yaml.AliasNode {
			used[n.Alias] = true
		}
		// Tagged too: "db: !!int 010" and "db: !!float 010" read as 8
		// with no word.
		if n.Kind == yaml.ScalarNode && (n.ShortTag() == "!!int" && !plainDecimal.MatchString(n.Value) ||
			n.ShortTag() == "!!float" && otherBase.MatchString(n.Value)) {
			errs = append(errs, fmt.Errorf("%s: an integer YAML reads in another base (a leading 0 is octal, 0x hex): want it in decimal, or quoted if it is text", name))
			return
		}
		if n.Kind == yaml.MappingNode {
			spelled := map[string]string{} // lower case -> as written
			for i := 0; i+1 < len(n.Content); i += 2 {
				k := n.Content[i].Value
				if first, ok := spelled[strings.ToLower(k)]; ok && first != k {
					errs = append(errs, fmt.Errorf("%s: the key %q is written twice, also as %q: viper reads keys in lower case and keeps only one",
						name, first, k))
				} else {
					spelled[strings.ToLower(k)] = k
				}
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
	// The non-specific tag ("! s3cret", "!<!> s3cret") leaves no trace in
	// the node (read as a plain string): it is found in the line.
	for _, v := range blockValues(strings.Split(string(raw), "\n")) {
		if v.value == "!" || strings.HasPrefix(v.value, "! ") || strings.HasPrefix(v.value, "!\t") || strings.HasPrefix(v.value, "!<!>") {
			errs = append(errs, fmt.Errorf("%s: a YAML tag (an unquoted value that starts with '!'): quote the value", v.key))
		}
	}
	for _, a := range anchors {
		if !used[a.node] {
			errs = append(errs, fmt.Errorf("%s: a YAML anchor that nothing refers to (an unquoted value that starts with '&'): quote the value", a.key))
		}
	}
	return errors.Join(errs...)
}

// yamlTags are the tags YAML itself defines: written on a value, each
// still reads a value of its kind.
var yamlTags = map[string]bool{"!!str": true, "!!int": true, "!!float": true, "!!bool": true, "!!null": true,
	"!!map": true, "!!seq": true, "!!binary": true, "!!timestamp": true, "!!merge": true}

// plainDecimal is an integer as a person writes it (10_000_000 too), with
// no base prefix and no leading 0.
var plainDecimal = regexp.MustCompile(`^[-+]?(0|[1-9][0-9]*(_[0-9]+)*)$`)

// otherBase is a number YAML reads in a base other than 10: a leading 0
// before a digit (octal), or 0x, 0o, 0b (a float's leading "0." is not).
var otherBase = regexp.MustCompile(`^[-+]?0[0-9_xXoObB]`)

// unknownAliasKeys names the keys (section.key, comma separated) of the
// YAML file at path whose unquoted value is an alias to no anchor ('*'
// and a name no '&' before it defined), or holds one in a '[' or '{'
// value closed on its line and defining no anchor (tls: {ca_file: *x}),
// when err is the YAML reader's refusal of such an alias: that refusal
// names neither key nor line, and quotes the alias, which may be a
// password ("password: *s3cret"). A list item (- *x) is named by its
// list's key. A value is
// blamed only if the file parses with every such value quoted, and fails
// for an unknown anchor with that one left as written: so a valid alias
// beside it (password: &pw "x" then sentinel_password: *pw) is not, nor
// is any when quoting does not make the file clean (an alias in a flow
// map written over several lines, a quoted text over several lines whose
// line reads like a key: a password's), and the caller gives the
// reader's own words instead.
func unknownAliasKeys(path string, err error) string {
	if !strings.Contains(err.Error(), "unknown anchor") {
		return ""
	}
	raw, rerr := os.ReadFile(path)
	if rerr != nil {
		return ""
	}
	lines := strings.Split(string(raw), "\n")
	var aliases []blockValue
	for _, v := range blockValues(lines) {
		// A flow value's alias is outside its quotes and comment; one that
		// defines an anchor is not quoted out, or a valid alias to it
		// elsewhere would be blamed.
		if strings.HasPrefix(v.value, "*") ||
			closedFlow(v.value) && strings.Contains(bare(v.value), "*") && !flowAnchor.MatchString(bare(v.value)) {
			aliases = append(aliases, v)
		}
	}
	if len(aliases) == 0 || parseQuoting(lines, aliases, -1) != nil {
		return ""
	}
	var keys []string
	for j, v := range aliases {
		err := parseQuoting(lines, aliases, j)
		if err != nil && strings.Contains(err.Error(), "unknown anchor") && !slices.Contains(keys, v.key) {
			keys = append(keys, v.key)
		}
	}
	return strings.Join(keys, ", ")
}

// flowAnchor finds an anchor in a flow value's bare text: '&' where a node
// starts (after '[', '{', ',' or a key's ': '), not inside a plain word
// (a&b).
var flowAnchor = regexp.MustCompile(`(^|[\[{,]|:\s)\s*&`)

// closedFlow says whether value starts a '[' list or '{' map and closes
// it on its line: a value that can be quoted whole. One left open goes on
// over the next lines (addrs: [ ... ]), and quoting its first line would
// break the file.
func closedFlow(value string) bool {
	return (strings.HasPrefix(value, "[") || strings.HasPrefix(value, "{")) && flowClosed(value)
}

// parseQuoting reads lines (a YAML file's) as viper reads them, into a
// map, with every value of values but values[kept] (every one, for kept
// -1) replaced by "": whether the file's fault is in the value kept.
func parseQuoting(lines []string, values []blockValue, kept int) error {
	quoted := slices.Clone(lines)
	for j, v := range values {
		if j != kept {
			quoted[v.line] = v.before + `""`
		}
	}
	var doc map[string]any
	return yaml.Unmarshal([]byte(strings.Join(quoted, "\n")), &doc)
}

// blockValue is one value written in a YAML file's block style: a key's
// (named section.key, or section for a top-level key), or a list item's
// (- value), named by its list's key.
type blockValue struct {
	line       int
	key, value string
	before     string // the line up to the value
	item       bool   // a list item
}

// blockValues is each value of lines (a YAML file's) in block style,
// read line by line: what names a value the YAML reader refused without
// naming it.
func blockValues(lines []string) []blockValue {
	var out []blockValue
	section, listKey := "", ""
	for i, line := range lines {
		v := blockValue{line: i}
		if m := blockKey.FindStringSubmatch(line); m != nil {
			if m[1] == "" {
				section, v.key = m[2], m[2]
			} else {
				v.key = section + "." + m[2]
			}
			listKey, v.value = v.key, m[3]
		} else if m := blockListItem.FindStringSubmatch(line); m != nil {
			v.key, v.value, v.item = listKey, m[1], true
		} else {
			continue
		}
		v.before = line[:len(line)-len(v.value)]
		out = append(out, v)
	}
	return out
}

// unquotedFlowKeys names the keys (section.key, comma separated) of the
// YAML file at path whose unquoted value starts with '[' or '{' and is no
// YAML, for when the YAML reader refused the file. The usual one is an
// IPv6 address (addr: [::1]:6379): a flow list that the rest of the value
// breaks, where the reader's error names neither key nor value, and the
// line before the one at fault. A list item (- [::1]:7001) is named by
// its list's key.
//
// A value is blamed only if the file parses with every such value
// quoted and does not with that one left as written. So a flow list
// written over several lines, a list of aliases, or a block scalar's
// text that looks like a key is never blamed for a fault elsewhere, whose
// reader's error (and line) the caller gives instead.
func unquotedFlowKeys(path string) string {
	raw, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(string(raw), "\n")
	var values []blockValue
	for _, v := range blockValues(lines) {
		if closedFlow(v.value) {
			values = append(values, v)
		}
	}
	// parsesQuoting says whether the file parses with every value but
	// values[kept] quoted (every one, for kept -1). Read as viper reads
	// it, into a map: a key twice in one flow map ({s3cret, s3cret}, a
	// password) fails only there.
	parsesQuoting := func(kept int) bool { return parseQuoting(lines, values, kept) == nil }
	if len(values) == 0 || !parsesQuoting(-1) {
		return ""
	}
	var keys []string
	for j, v := range values {
		if !parsesQuoting(j) && !slices.Contains(keys, v.key) {
			keys = append(keys, v.key)
		}
	}
	return strings.Join(keys, ", ")
}

// flowClosed says whether every '[' and '{' of value is closed on it,
// outside quotes and before a comment: whether a flow value ends on its
// line.
func flowClosed(value string) bool {
	b := bare(value)
	return strings.Count(b, "[")+strings.Count(b, "{") <= strings.Count(b, "]")+strings.Count(b, "}")
}

// bare is value's text outside quotes, up to a comment: what YAML reads
// as syntax in it.
func bare(value string) string {
	var b strings.Builder
	var quote, last rune
	for _, r := range value {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			}
		case r == '#' && (last == ' ' || last == '\t'):
			return b.String()
		case r == '"' || r == '\'':
			quote = r
		default:
			b.WriteRune(r)
		}
		last = r
	}
	return b.String()
}

// blockListItem is a line "- value" of a block list: its value.
var blockListItem = regexp.MustCompile(`^\s*-\s+(.*)$`)

// blockKey is a line "key: value" of a block mapping: its indentation, its
// key and its value.
var blockKey = regexp.MustCompile(`^(\s*)([A-Za-z0-9_]+)\s*:\s*(.*)$`)
