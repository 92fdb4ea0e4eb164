//go:build unix

package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// runInChild runs t's test alone in a child process of this test binary,
// with env set, and reports whether this is the parent, which then
// returns: the child's verdict is t's. A test that lowers the process's
// descriptor limit runs so, leaving the other tests theirs.
//
// A child that skipped (no rlimit to lower, no /proc) or ran no test at
// all (a -test.run pattern the test's name no longer matches) exits 0
// too: only its PASS line says the test ran. A host that cannot lower the
// limit skips, except under CI, whose hosts can.
func runInChild(t *testing.T, env string, timeout time.Duration) (parent bool) {
	t.Helper()
	if os.Getenv(env) != "" {
		return false
	}
	name := t.Name()
	cmd := exec.Command(os.Args[0], "-test.run=^"+name+"$", "-test.count=1", "-test.v", "-test.timeout="+timeout.String())
	cmd.Env = append(os.Environ(), env+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	if strings.Contains(string(out), "--- SKIP: "+name) && os.Getenv("CI") == "" {
		t.Skipf("child skipped:\n%s", out)
	}
	if !strings.Contains(string(out), "--- PASS: "+name) {
		t.Fatalf("child did not pass the test (skipped, or ran none):\n%s", out)
	}
	return true
}
