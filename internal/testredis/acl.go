package testredis

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// READMEACLRules are the rules of README's "ACL SETUSER combo on >… ..."
// line, the one it says is enough, read from the README at readme so that
// tests follow it.
func READMEACLRules(t testing.TB, readme string) []string {
	t.Helper()
	raw, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Join(strings.Fields(string(raw)), " ") // the line wraps
	const lead = "`ACL SETUSER combo on >… "
	i := strings.Index(s, lead)
	if i < 0 {
		t.Fatalf("%s has no %q line", readme, lead)
	}
	rules, _, _ := strings.Cut(s[i+len(lead):], "`")
	return strings.Fields(rules)
}

// SetREADMEACLUser makes user "combo" with password pw and README's rules
// on the node that do sends its command to.
func SetREADMEACLUser(t testing.TB, do func(args ...any) error, readme, pw string) {
	t.Helper()
	args := []any{"ACL", "SETUSER", "combo", "reset", "on", ">" + pw}
	for _, r := range READMEACLRules(t, readme) {
		args = append(args, r)
	}
	if err := do(args...); err != nil {
		t.Fatal(err)
	}
}

// NoneDenied fails tb if node's ACL LOG holds a denial: it also catches
// commands whose refusal go-redis swallows and only retries (the Cluster
// client's COMMAND, asked before every command not pipelined, holding one
// client-wide lock while it asks up to three nodes).
func NoneDenied(tb testing.TB, node *redis.Client) {
	tb.Helper()
	entries, err := node.Do(context.Background(), "ACL", "LOG").Slice()
	if err != nil {
		tb.Fatal(err)
	}
	if len(entries) > 0 {
		// Redis folds repeated denials into one entry with a count.
		tb.Errorf("%s: README's ACL user was denied (%d kinds), latest: %v", node.Options().Addr, len(entries), entries[0])
	}
}
