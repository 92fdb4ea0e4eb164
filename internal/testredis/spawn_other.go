//go:build !linux

package testredis

import "os/exec"

// startCmd starts cmd; only Linux has a parent-death signal to tie the
// server's life to the test binary's.
func startCmd(cmd *exec.Cmd) error { return cmd.Start() }
