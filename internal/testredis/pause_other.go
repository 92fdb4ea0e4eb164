//go:build !unix

package testredis

import "os"

// sigStop and sigCont: no SIGSTOP or SIGCONT here; Pause and Resume skip
// the test.
var sigStop, sigCont os.Signal
