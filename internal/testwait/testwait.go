// Package testwait waits, in tests, for a condition that an event makes
// true, or on a channel, with a deadline, so that a regression fails its
// own test within seconds instead of hanging the package until go test's
// timeout.
package testwait

import (
	"testing"
	"time"
)

// Deadline is how long For, Receive and Send wait: far past any event the
// tests wait for (a window of 200 ms, a claim after a few seconds).
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

// Receive returns the next value on ch, failing t after Deadline, saying
// what it waited for: a bare <-ch waits for ever on a regression that
// never sends (a dial never made, a run that failed before it started).
func Receive[T any](t testing.TB, what string, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(Deadline):
		t.Fatalf("waited %s for %s", Deadline, what)
		var zero T
		return zero
	}
}

// Send puts v on ch, failing t if ch has no room within Deadline, saying
// what it was for: a fake's answer queued for a reading that never took
// the one before waits for ever on a bare ch <- v.
func Send[T any](t testing.TB, what string, ch chan<- T, v T) {
	t.Helper()
	select {
	case ch <- v:
	case <-time.After(Deadline):
		t.Fatalf("waited %s to hand over %s", Deadline, what)
	}
}
