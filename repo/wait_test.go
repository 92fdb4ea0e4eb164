package repo_test

import (
	"testing"
	"time"
)

// waitFor polls cond until it holds, failing the test after 10 s: a
// regression fails its test, not the whole package at go test's timeout.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 10 s for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
