package handler

import (
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/combo-service/combo-service/internal/stacks"
)

// goroutineID is the running goroutine's number, from its stack's first
// line ("goroutine 123 [running]:").
func goroutineID() string {
	var buf [64]byte
	return strings.Fields(string(buf[:runtime.Stack(buf[:], false)]))[1]
}

// goroutineState is what goroutine id waits on ("select", "chan receive")
// and its stack; ok is false once it has ended. Tests use it to wait for
// a goroutine to block where another package's state cannot be read.
func goroutineState(id string) (state, stack string, ok bool) {
	for _, g := range stacks.All() {
		// "goroutine 123 [select]:" or "goroutine 123 [select, 2 minutes]:"
		header, stack, _ := strings.Cut(g, "\n")
		f := strings.SplitN(header, " ", 3)
		if len(f) == 3 && f[0] == "goroutine" && f[1] == id {
			state, _, _ = strings.Cut(strings.TrimSuffix(strings.TrimPrefix(f[2], "["), "]:"), ",")
			return state, stack, true
		}
	}
	return "", "", false
}

// waitFor polls cond until it holds, failing the test after 10 s.
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
