package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// -probe-hook runs its command to completion (a callgrind dump must be
// written before the probe starts) and a failing hook stops the curve.
func TestRunHook(t *testing.T) {
	if err := runHook(""); err != nil {
		t.Fatalf("no hook: %v", err)
	}
	mark := filepath.Join(t.TempDir(), "mark")
	if err := runHook("sleep 0.1; echo dumped >> " + mark); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(mark); err != nil || string(b) != "dumped\n" {
		t.Fatalf("hook did not finish before runHook returned: %q, %v", b, err)
	}
	err := runHook("echo no such pid >&2; exit 3")
	if err == nil || !strings.Contains(err.Error(), "-probe-hook") || !strings.Contains(err.Error(), "no such pid") {
		t.Fatalf("failing hook: got %v, want an error naming -probe-hook with its output", err)
	}
}
