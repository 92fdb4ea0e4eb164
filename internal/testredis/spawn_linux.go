//go:build linux

package testredis

import (
	"os/exec"
	"runtime"
	"sync"
	"syscall"
)

// redis-servers (and, through StartChild, faultinject's replicas) are
// started with PR_SET_PDEATHSIG = SIGKILL, so a test binary that dies (a
// -timeout panic, a crash, a SIGKILL) does not leave them behind. The
// kernel sends the signal when the *thread* that forked the child exits,
// and Go may retire threads; so every child is forked from one goroutine
// locked to its thread for the life of the test binary.
type spawnReq struct {
	cmd  *exec.Cmd
	done chan error
}

var (
	spawnOnce sync.Once
	spawnCh   = make(chan spawnReq)
)

// StartChild starts cmd, a process that must not outlive the test binary.
func StartChild(cmd *exec.Cmd) error {
	spawnOnce.Do(func() {
		go func() {
			runtime.LockOSThread() // never unlocked: this thread lives as long as the process
			for req := range spawnCh {
				req.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
				req.done <- req.cmd.Start()
			}
		}()
	})
	done := make(chan error, 1)
	spawnCh <- spawnReq{cmd: cmd, done: done}
	return <-done
}
