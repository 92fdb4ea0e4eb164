//go:build unix

package main

import "golang.org/x/sys/unix"

// openFileLimit is the process's open-file limit: RLIMIT_NOFILE's soft
// limit, which Go raises to the hard one as the process starts (on Linux
// and macOS), so it is what the service can open. Unlimited reads as the
// largest value, which no configuration exceeds.
func openFileLimit() (uint64, bool) {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
		return 0, false
	}
	return uint64(rl.Cur), true //nolint:unconvert // int64 on some BSDs
}
