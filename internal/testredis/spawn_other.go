//go:build !linux

package testredis

import "os/exec"

// StartChild starts cmd; only Linux has a parent-death signal to tie the
// child's life to the test binary's.
func StartChild(cmd *exec.Cmd) error { return cmd.Start() }
