//go:build unix

package testredis

import (
	"os"
	"syscall"
)

// sigStop and sigCont are Pause's and Resume's signals.
var sigStop, sigCont os.Signal = syscall.SIGSTOP, syscall.SIGCONT
