//go:build unix && !linux

package faultinject

import "os/exec"

func startCmd(cmd *exec.Cmd) error { return cmd.Start() }
