// Package testwait waits, in tests, for a condition that an event makes
// true: polled, with a deadline, so that a regression fails its own test
// within seconds instead of hanging the package until go test's timeout.
package testwait

import (
	"testing"
	"time"
)

// Deadline is how long For waits: far past any event the tests wait for
// (a window of 200 ms, a claim after a few seconds).
const Deadline = 10 * time.Second

// For polls cond every 2 ms until it holds, failing t after Deadline,
// saying what it waited for.
func For(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(Deadline)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s", Deadline, what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}
