package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/combo-service/combo-service/window"
)

func TestCells(t *testing.T) {
	for _, c := range []struct {
		s    string
		want int
	}{
		{"", 0},
		{"Lucy", 4},
		{"小明", 4},
		{"[1001] 小明 送烟花 ×3", 21},
		{"ｘ", 2},       // fullwidth
		{"e\u0301", 1}, // combining accent
	} {
		if got := cells(c.s); got != c.want {
			t.Errorf("cells(%q) = %d, want %d", c.s, got, c.want)
		}
	}
}

func TestFit(t *testing.T) {
	for _, c := range []struct {
		s    string
		w    int
		want string
	}{
		{"小明", 6, "小明  "},
		{"Lucy", 6, "Lucy  "},
		{"小明送烟花", 6, "小明… "}, // a wide rune never straddles the edge
		{"abcdefgh", 6, "abcde…"},
	} {
		got := fit(c.s, c.w)
		if got != c.want || cells(got) != c.w {
			t.Errorf("fit(%q, %d) = %q (%d cells), want %q", c.s, c.w, got, cells(got), c.want)
		}
	}
}

// The scripted story merges as its notes say, by the contract's rule, at
// any window size it is scaled to.
func TestScriptedMergesAsNarrated(t *testing.T) {
	for _, w := range []time.Duration{time.Second, 3 * time.Second, 10 * time.Second} {
		s := scripted(1001, 1002, w, 200*time.Millisecond)
		if !slices.IsSortedFunc(s, func(a, b click) int { return int(a.At - b.At) }) {
			t.Fatalf("W=%s: taps are not in time order", w)
		}
		rows := make([]window.Row, len(s))
		var taps int32
		for i, k := range s {
			rows[i] = window.Row{ID: int64(i + 1), ActivityID: k.Activity, UserID: k.User.ID, ItemID: k.Item.ID,
				ItemType: k.Item.Type, Quantity: k.Qty, CreatedAt: 1_700_000_000_000 + k.At.Milliseconds()}
			taps += k.Qty
		}
		merged := window.Merge(rows, w)
		var sum int32
		for _, m := range merged {
			sum += m.Quantity
		}
		if len(s) != 27 || len(merged) != 12 || sum != taps {
			t.Errorf("W=%s: %d taps (quantity %d) merged into %d records (quantity %d), want 27 into 12",
				w, len(s), taps, len(merged), sum)
		}
		// Each window by its first tap (1-based) and quantity, newest
		// first: tap 12, at 3.1 s of 3, opens a window of its own as its
		// note says (at 2.9 s it joined tap 1's, still 12 windows in all).
		var got []string
		for _, m := range merged {
			got = append(got, fmt.Sprintf("%d×%d", m.ID, m.Quantity))
		}
		if want := "25×2 24×3 23×5 20×1 18×4 14×3 12×2 10×1 9×3 6×1 3×12 1×4"; strings.Join(got, " ") != want {
			t.Errorf("W=%s: windows (first tap×quantity) %s, want %s", w, strings.Join(got, " "), want)
		}
		if last := s[len(s)-1].At; last > 4*w {
			t.Errorf("W=%s: the script lasts %s, want at most 4 W", w, last)
		}
	}
}

func TestRandomIsSeededAndBounded(t *testing.T) {
	a := random(1, 2, 3*time.Second, 10*time.Second, 42)
	b := random(1, 2, 3*time.Second, 10*time.Second, 42)
	if !slices.Equal(a, b) || len(a) == 0 {
		t.Fatalf("random is not reproducible for one seed (%d vs %d taps)", len(a), len(b))
	}
	for _, k := range a {
		if k.At >= 10*time.Second || k.Qty < 1 || (k.Activity != 1 && k.Activity != 2) {
			t.Fatalf("bad tap %+v", k)
		}
	}
}

// The Redis password comes from COMBO_REDIS_PASSWORD, but is never shown
// as the flag's default: -h, or any mistyped flag, prints the usage to
// stderr, a terminal's scrollback or a container's log.
func TestUsageDoesNotShowThePassword(t *testing.T) {
	t.Setenv("COMBO_REDIS_PASSWORD", "s3cret")
	for _, args := range [][]string{{"-h"}, {"-no-such-flag"}} {
		var out strings.Builder
		fs := flag.NewFlagSet("combo-demo", flag.ContinueOnError)
		fs.SetOutput(&out)
		if _, err := parseFlags(fs, args); err == nil {
			t.Fatalf("%v parsed", args)
		}
		if strings.Contains(out.String(), "s3cret") || !strings.Contains(out.String(), "-redis-password") {
			t.Errorf("usage after %v shows the password:\n%s", args, out.String())
		}
	}
	fs := flag.NewFlagSet("combo-demo", flag.ContinueOnError)
	if o, err := parseFlags(fs, nil); err != nil || o.redisPassword != "s3cret" {
		t.Fatalf("without -redis-password: %q, %v; want $COMBO_REDIS_PASSWORD", o.redisPassword, err)
	}
	fs = flag.NewFlagSet("combo-demo", flag.ContinueOnError)
	if o, err := parseFlags(fs, []string{"-redis-password", "other"}); err != nil || o.redisPassword != "other" {
		t.Fatalf("-redis-password other: %q, %v; want the flag's", o.redisPassword, err)
	}
}

// A random scenario too short for any tap is refused before anything is
// dialled (it used to dial, then index the empty script and panic).
func TestEmptyRandomScenarioIsRefused(t *testing.T) {
	if s := random(1001, 1002, 3*time.Second, 500*time.Millisecond, 1); len(s) != 0 {
		t.Fatalf("seed 1 over 500ms gives %d taps; the test needs a seed that gives none", len(s))
	}
	// An address nothing listens on: dialling it would fail with another message.
	o := options{addr: "127.0.0.1:1", redisAddr: "127.0.0.1:1", window: 3 * time.Second, scenario: "random",
		duration: 500 * time.Millisecond, seed: 1, activity: 1001, color: "never"}
	code, err := run(context.Background(), o)
	if code != 2 || err == nil || !strings.Contains(err.Error(), "gives no taps") {
		t.Fatalf("run = %d, %v; want 2 and an error saying the scenario gives no taps", code, err)
	}
}

// The note before the pause says every window has been pushed only when it
// is true: grace is not scaled with W, so at W <= 333 ms (grace 200 ms) the
// last window before the pause is still open when the pause ends.
func TestScriptedPauseNoteIsTrue(t *testing.T) {
	const pushedNote = "every window should have closed and been pushed"
	for _, c := range []struct {
		w, grace time.Duration
		pushed   bool
	}{
		{3 * time.Second, 200 * time.Millisecond, true},
		{time.Second, 200 * time.Millisecond, true},
		{333 * time.Millisecond, 200 * time.Millisecond, false},
		{200 * time.Millisecond, 200 * time.Millisecond, false},
		{3 * time.Second, 2 * time.Second, false},
	} {
		s := scripted(1001, 1002, c.w, c.grace)
		note := s[17].Note
		if strings.Contains(note, pushedNote) != c.pushed || !strings.Contains(note, "pause") {
			t.Errorf("W=%s grace=%s: note %q, want pushed claimed: %v", c.w, c.grace, note, c.pushed)
		}
		// Always true: the pause is longer than W, so no window spans it.
		before := len(window.Merge(rowsOf(s[:17]), c.w)) + len(window.Merge(rowsOf(s[17:]), c.w))
		if all := len(window.Merge(rowsOf(s), c.w)); before != all {
			t.Errorf("W=%s: a window spans the pause (%d windows, %d when split there)", c.w, all, before)
		}
	}
}

func rowsOf(s []click) []window.Row {
	rows := make([]window.Row, len(s))
	for i, k := range s {
		rows[i] = window.Row{ID: int64(i + 1), ActivityID: k.Activity, UserID: k.User.ID, ItemType: k.Item.Type,
			Quantity: k.Qty, CreatedAt: 1_700_000_000_000 + k.At.Milliseconds()}
	}
	return rows
}

// A COMBO_WINDOW_SIZE or COMBO_WINDOW_GRACE that does not parse is refused
// naming the variable, as the service refuses it: it fell back to 3s or
// 200ms in silence, timing the pushes of a service that used neither.
// Given, the flag wins over the variable; a valid one is the default.
func TestEnvDurationThatDoesNotParseIsRefused(t *testing.T) {
	for _, tc := range []struct {
		size, grace string
		args        []string
		refused     string // the variable named, or "" for none
		window, g   time.Duration
	}{
		{size: "3", refused: "COMBO_WINDOW_SIZE"},
		{grace: "fast", refused: "COMBO_WINDOW_GRACE"},
		{size: "2s", grace: "200 ms", refused: "COMBO_WINDOW_GRACE"},
		{size: "3", args: []string{"-window", "2s"}, window: 2 * time.Second, g: 200 * time.Millisecond},
		{grace: "x", args: []string{"-grace", "0s"}, window: 3 * time.Second, g: 0},
		{size: "1500ms", grace: "0s", window: 1500 * time.Millisecond, g: 0},
		{window: 3 * time.Second, g: 200 * time.Millisecond},
	} {
		t.Setenv("COMBO_WINDOW_SIZE", tc.size)
		t.Setenv("COMBO_WINDOW_GRACE", tc.grace)
		fs := flag.NewFlagSet("combo-demo", flag.ContinueOnError)
		o, err := parseFlags(fs, tc.args)
		if tc.refused != "" {
			if err == nil || !strings.Contains(err.Error(), tc.refused+"=") || !strings.Contains(err.Error(), "duration") {
				t.Errorf("%+v: %v, want an error naming %s", tc, err, tc.refused)
			}
			continue
		}
		if err != nil || o.window != tc.window || o.grace != tc.g {
			t.Errorf("%+v: -window %s -grace %s, %v; want %s and %s", tc, o.window, o.grace, err, tc.window, tc.g)
		}
	}
}

// ... and the demo then exits 2 saying why, before it dials anything.
func TestEnvDurationThatDoesNotParseExits2(t *testing.T) {
	if os.Getenv("COMBO_DEMO_TEST_MAIN") == "1" {
		os.Args = []string{"combo-demo", "-addr", "127.0.0.1:1", "-redis", "127.0.0.1:1"}
		main()
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestEnvDurationThatDoesNotParseExits2$")
	cmd.Env = append(os.Environ(), "COMBO_DEMO_TEST_MAIN=1", "COMBO_WINDOW_SIZE=3")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(string(out), `COMBO_WINDOW_SIZE="3"`) {
		t.Fatalf("exit %v, output %q; want 2 naming COMBO_WINDOW_SIZE", err, out)
	}
}

// Ctrl-C while the start-up PING waits on a Redis that does not answer
// exits 130, saying it was interrupted: it exited 2 with "cannot reach
// Redis at ...: context canceled", sending the user to check -redis.
func TestInterruptWhileStartingIsNoUnreachableRedis(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dialled := make(chan struct{}, 1)
	go func() { // accepts, and never answers
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
			select {
			case dialled <- struct{}{}:
			default:
			}
		}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	o := options{addr: "127.0.0.1:1", redisAddr: ln.Addr().String(), window: 3 * time.Second, grace: 200 * time.Millisecond,
		scenario: "script", activity: 1001, color: "never"}
	type result struct {
		code int
		err  error
	}
	done := make(chan result, 1)
	go func() { code, err := run(ctx, o); done <- result{code, err} }()
	select {
	case <-dialled: // the PING is on its way: it waits up to 3 s
	case r := <-done:
		t.Fatalf("run = %d, %v before it dialled Redis", r.code, r.err)
	case <-time.After(10 * time.Second):
		t.Fatal("run did not dial Redis within 10 s")
	}
	cancel()
	var r result
	select {
	case r = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return within 10 s of its interrupt")
	}
	if r.code != 130 || r.err == nil || !strings.Contains(r.err.Error(), "interrupted while starting") {
		t.Fatalf("run = %d, %v; want 130, interrupted while starting", r.code, r.err)
	}
}

// A long random run exercises what the demo checks: taps in both
// activities, gifts of more than one, and a user pausing longer than W
// between two taps of one item, so that the later tap opens a new window.
func TestRandomCoversBothActivitiesQuantitiesAndNewWindows(t *testing.T) {
	const w = 3 * time.Second
	s := random(1001, 1002, w, 60*time.Second, 1)
	acts, big, paused := map[int64]bool{}, false, false
	last := map[int64]click{} // each user's previous tap
	for _, k := range s {
		acts[k.Activity] = true
		big = big || k.Qty > 1
		if p, ok := last[k.User.ID]; ok && p.Item == k.Item && p.Activity == k.Activity && k.At-p.At > w {
			paused = true
		}
		last[k.User.ID] = k
	}
	if len(acts) != 2 || !big || !paused {
		t.Errorf("a 60 s random run: activities %v, a quantity above 1 %v, a pause longer than W within one key %v; want all",
			acts, big, paused)
	}
}

// -color never prints no escape codes (a log file or a CI job's output),
// always does, auto follows NO_COLOR; another value is refused.
func TestUseColor(t *testing.T) {
	t.Setenv("NO_COLOR", "1")
	for _, c := range []struct {
		mode string
		want bool
	}{{"never", false}, {"always", true}, {"auto", false}} {
		if got, err := useColor(c.mode, os.Stdout); got != c.want || err != nil {
			t.Errorf("useColor(%q) with NO_COLOR = %v, %v; want %v", c.mode, got, err, c.want)
		}
	}
	if _, err := useColor("yes", os.Stdout); err == nil || !strings.Contains(err.Error(), "-color") {
		t.Errorf("useColor(\"yes\") = %v, want an error naming -color", err)
	}
}
