//go:build linux

package faultinject

import (
	"os/exec"
	"runtime"
	"syscall"
)

// Replicas are started with PR_SET_PDEATHSIG = SIGKILL, so a test binary
// that dies (a -timeout panic, a crash) does not leave service processes
// behind. The kernel sends the signal when the *thread* that forked the
// child exits, and Go may retire threads; so every child is forked from one
// goroutine locked to its thread for the life of the test binary.
type spawnReq struct {
	cmd  *exec.Cmd
	done chan error
}

var spawnCh = make(chan spawnReq)

func init() {
	go func() {
		runtime.LockOSThread() // never unlocked: this thread lives as long as the process
		for req := range spawnCh {
			req.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
			req.done <- req.cmd.Start()
		}
	}()
}

func startCmd(cmd *exec.Cmd) error {
	done := make(chan error, 1)
	spawnCh <- spawnReq{cmd: cmd, done: done}
	return <-done
}
