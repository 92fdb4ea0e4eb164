package main

import "golang.org/x/sys/unix"

// finReceived reports whether the peer has closed its side of TCP socket
// fd (state CLOSE_WAIT), even with bytes still waiting to be read.
func finReceived(fd int) bool {
	info, err := unix.GetsockoptTCPInfo(fd, unix.IPPROTO_TCP, unix.TCP_INFO)
	return err == nil && info.State == unix.BPF_TCP_CLOSE_WAIT
}
