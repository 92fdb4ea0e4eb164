package logging

import (
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// A sampled line that follows no suppressed one carries no count: an
// on-call reading "suppressed_since_last": 0 on every line would take it
// for a burst that never came.
func TestSampledLineWithNothingLeftOutHasNoCount(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	at := time.Unix(1_700_000_000, 0)
	l := sampled(zap.New(core), nil, func() time.Time { return at })
	l.Warn("redis operation failed; retrying")
	at = at.Add(2 * time.Second)
	l.Warn("redis operation failed; retrying")
	if logs.Len() != 2 {
		t.Fatalf("%d lines, want 2", logs.Len())
	}
	for i, e := range logs.All() {
		if m := e.ContextMap(); len(m) != 0 {
			t.Errorf("line %d, none left out before it: fields %v, want none", i, m)
		}
	}
}

// The same for netpoll's lines.
func TestNetpollLineWithNothingLeftOutHasNoCount(t *testing.T) {
	w, logs, clock := observedNetpoll(zapcore.DebugLevel)
	nl := netpollLogger(w)
	nl.Printf("NETPOLL: accept conn failed: %v", "too many open files")
	*clock = clock.Add(2 * time.Second)
	nl.Printf("NETPOLL: accept conn failed: %v", "too many open files")
	if logs.Len() != 2 {
		t.Fatalf("%d lines, want 2", logs.Len())
	}
	for i, e := range logs.All() {
		if m := e.ContextMap(); len(m) != 0 {
			t.Errorf("line %d, none left out before it: fields %v, want none", i, m)
		}
	}
}

// log.LstdFlags's date is trimmed whatever its digits: left on a line
// with a 9 in it, the date would also be the line's sampling key
// ("// :: NETPOLL"), and every kind of netpoll line would share one.
func TestTrimLogDateTakesEveryDigit(t *testing.T) {
	for _, s := range []string{"2019/09/29 19:59:59 NETPOLL: x", "2000/10/01 00:00:00 NETPOLL: x", "2345/06/78 12:34:56 NETPOLL: x"} {
		if got := string(trimLogDate([]byte(s))); got != "NETPOLL: x" {
			t.Errorf("trimLogDate(%q) = %q, want %q", s, got, "NETPOLL: x")
		}
	}
}

// Every digit, 9 too, is left out of a netpoll line's key: a file
// descriptor of 9 and one of 7 are one kind of line.
func TestNetpollKeyLeavesOutTheDigitNine(t *testing.T) {
	for _, fd := range []string{"9", "19", "99", "1234567890"} {
		if a, b := netpollKey("NETPOLL: netFD["+fd+"] close error: x"), netpollKey("NETPOLL: netFD[7] close error: y"); a != b {
			t.Errorf("fd %s: keys %q and %q, want one", fd, a, b)
		}
	}
}

// Past the bound, a key idle for exactly a second with nothing to report
// is forgotten, as its next line would be written then anyway.
func TestKeySamplerBoundForgetsAKeyIdleExactlyASecond(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	s := fullSampler(&now)
	now = now.Add(time.Second)
	s.pass("new")
	if ok, _, _ := s.pass("new"); ok {
		t.Fatal("a new key's second line in the same instant written: the keys idle for a second were kept, and it went unsampled")
	}
}

// Kitex's lines are the service logger's named "kitex", as netpoll's are
// named "netpoll": a log query for the RPC layer's refusals selects them
// by that name.
func TestKlogLinesAreNamedKitex(t *testing.T) {
	k, logs, _ := observedKlog(zapcore.DebugLevel)
	k.Errorf("KITEX: processing request error, remoteAddr=%v", "127.0.0.1:1")
	k.Warn("KITEX: x")
	for _, e := range logs.All() {
		if e.LoggerName != "kitex" {
			t.Errorf("%q: logger %q, want kitex", e.Message, e.LoggerName)
		}
	}
	if logs.Len() != 2 {
		t.Fatalf("%d lines, want 2", logs.Len())
	}
}
