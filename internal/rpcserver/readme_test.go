package rpcserver

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// README states the RPC server's bounds by their values, which operators
// size replicas and callers by: each is the constant's.
func TestREADMEStatesTheBounds(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := strings.Join(strings.Fields(string(b)), " ")
	for _, want := range []string{
		fmt.Sprintf("within %d MiB at once (`rpcserver.MaxLargeInFlightBytes`", MaxLargeInFlightBytes>>20),
		fmt.Sprintf("at %d GiB, `rpcserver.MaxUnreadTotalBytes`", MaxUnreadTotalBytes>>30),
		fmt.Sprintf("for up to %d s (`rpcserver.ReadWriteTimeout`)", int(ReadWriteTimeout.Seconds())),
		fmt.Sprintf("at most %d MB of further requests sent on its connection", MaxAheadBytes>>20),
		fmt.Sprintf("holding more than %d MB it sent unread (a request and that bound)", (MaxRequestBytes+MaxAheadBytes)>>20),
		fmt.Sprintf("is closed within %d ms and logged", unreadInterval.Milliseconds()),
		fmt.Sprintf("one silent for %d min is closed", int(MaxConnIdle.Minutes())),
	} {
		if !strings.Contains(readme, want) {
			t.Errorf("README does not say %q", want)
		}
	}
}
