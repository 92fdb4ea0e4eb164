// Package faultinject is combo-service's fault-injection suite (issue 3,
// CONTRACT.md §3 crash safety). Its tests build the service binary from
// this module, run two or three replicas as real processes on one real
// redis-server (AOF on, appendfsync always), drive reports through the RPC
// while killing (SIGKILL), pausing (SIGSTOP) and restarting replicas, and
// killing and restarting Redis (or having it refuse writes), subscribe to
// every push, and check that each acknowledged quantity is in exactly one
// push: no window lost, none published twice.
//
// The package has no API; everything lives in its _test.go files:
//
//	go test -race -count=1 -v ./faultinject/
//
// Environment:
//
//	FAULTINJECT_SUMMARY=<file>  also write the summary table (Markdown) there
//	FAULTINJECT_LOGDIR=<dir>    keep every replica's log under <dir>/<test>/
//	                            (default: a temporary directory; on failure the
//	                            tail of each log is printed)
//
// With -short the long random-kill scenario is skipped.
package faultinject
