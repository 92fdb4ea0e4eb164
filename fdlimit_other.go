//go:build !unix

package main

// openFileLimit: Windows has no per-process limit of this kind on
// sockets, so there is none to check.
func openFileLimit() (uint64, bool) { return 0, false }
