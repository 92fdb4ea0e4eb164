// Package stacks reads the stacks of all goroutines, for tests that wait
// for a goroutine to block, or to end, where no state of the code under
// test can be read.
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
