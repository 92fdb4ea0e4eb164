// Package stacks reads the stacks of goroutines, for tests that wait for a
// goroutine to block, or to end, where no state of the code under test
// can be read.
package stacks

import (
	"runtime"
	"strings"
)

// All is the stack of every goroutine, one string each, headed by its
// line "goroutine 123 [select]:".
func All() []string {
	buf := make([]byte, 1<<16)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Split(string(buf[:n]), "\n\n")
		}
		buf = make([]byte, 2*len(buf))
	}
}

// Self is the running goroutine's number, from its stack's first line.
func Self() string {
	var buf [64]byte
	return strings.Fields(string(buf[:runtime.Stack(buf[:], false)]))[1]
}

// State is what goroutine id waits on ("select", "chan receive",
// "sync.Mutex.Lock"; "running" or "runnable" when it waits on nothing)
// and its stack; ok is false once it has ended.
func State(id string) (state, stack string, ok bool) {
	for _, g := range All() {
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
