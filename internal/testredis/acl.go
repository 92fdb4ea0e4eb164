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
	return readmeACLRules(t, readme, "combo")
}

// READMESentinelACLRules are the rules of README's "ACL SETUSER
// combo-sentinel on >… ..." line, the Sentinel user's.
func READMESentinelACLRules(t testing.TB, readme string) []string {
	t.Helper()
	return readmeACLRules(t, readme, "combo-sentinel")
}

// readmeACLRules reads the rules of README's line for user.
func readmeACLRules(t testing.TB, readme, user string) []string {
	t.Helper()
	raw, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Join(strings.Fields(string(raw)), " ") // the line wraps
	lead := "`ACL SETUSER " + user + " on >… "
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
	setUser(t, do, "combo", pw, READMEACLRules(t, readme))
}

// SetREADMESentinelACLUser makes user "combo-sentinel" with password pw
// and README's rules for it on the Sentinel that do sends its command to.
func SetREADMESentinelACLUser(t testing.TB, do func(args ...any) error, readme, pw string) {
	t.Helper()
	setUser(t, do, "combo-sentinel", pw, READMESentinelACLRules(t, readme))
}

func setUser(t testing.TB, do func(args ...any) error, user, pw string, rules []string) {
	t.Helper()
	args := []any{"ACL", "SETUSER", user, "reset", "on", ">" + pw}
	for _, r := range rules {
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
