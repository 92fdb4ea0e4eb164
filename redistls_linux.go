package main

import "golang.org/x/sys/unix"

// finReceived reports whether the peer has ended the connection on TCP
// socket fd, even with bytes still waiting to be read: any state but
// ESTABLISHED. A FIN leaves it in CLOSE_WAIT; a reset after it, or
// keep-alives unanswered, in CLOSE. The latter is what a connection Redis
// closed while idle comes to: a keep-alive probe goes out 30 s later, and
// once Redis's side is gone (tcp_fin_timeout, 60 s) it is answered with a
// reset, the TLS alert still waiting. go-redis never half-closes a pooled
// connection itself, so no healthy one is in another state.
func finReceived(fd int) bool {
	info, err := unix.GetsockoptTCPInfo(fd, unix.IPPROTO_TCP, unix.TCP_INFO)
	return err == nil && info.State != unix.BPF_TCP_ESTABLISHED
}
