package main

import (
	"errors"
	"flag"
	"strings"
	"testing"
	"time"
)

func TestParseFlagsFloor(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		wantErr string // "" = accepted
	}{
		{[]string{"-mode", "compare"}, ""},
		{[]string{"-mode", "compare", "-floor", "127.0.0.1:8899", "-floor-pid", "42"}, ""},
		{[]string{"-mode", "floor", "-floor", "localhost:8899"}, ""},
		{[]string{"-mode", "floor"}, "-mode floor needs -floor"},
		{[]string{"-mode", "compare", "-floor", "10.1.2.3:8899"}, "-floor: \"10.1.2.3\" is not a loopback address"},
		{[]string{"-floor", "nonsense"}, "-floor:"},
	} {
		_, err := parseFlags(tc.args)
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%q: %v", tc.args, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%q: got error %v, want one containing %q", tc.args, err, tc.wantErr)
		}
	}
}

// -late-horizon's default is derived from -window and -grace: unset it
// takes that, -h prints no marker value for it, and a negative one is
// refused rather than read as unset.
func TestLateHorizonDefaultIsDerived(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		want    time.Duration
		wantErr string
	}{
		{nil, 3*time.Second + 200*time.Millisecond + 3*time.Second, ""},
		{[]string{"-window", "1s", "-grace", "100ms"}, 4100 * time.Millisecond, ""},
		{[]string{"-late-horizon", "0"}, 0, ""},
		{[]string{"-late-horizon", "2s"}, 2 * time.Second, ""},
		{[]string{"-late-horizon", "-1ns"}, 0, "negative"},
	} {
		c, err := parseFlags(tc.args)
		switch {
		case tc.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%q: got error %v, want one containing %q", tc.args, err, tc.wantErr)
			}
		case err != nil:
			t.Errorf("%q: %v", tc.args, err)
		case c.LateHorizon != tc.want:
			t.Errorf("%q: late horizon %s, want %s", tc.args, c.LateHorizon, tc.want)
		}
	}
	var usage strings.Builder
	fs := flag.NewFlagSet("combo-bench", flag.ContinueOnError)
	fs.SetOutput(&usage)
	if _, err := parseFlagsOn(fs, []string{"-h"}); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: %v", err)
	}
	if strings.Contains(usage.String(), "-1ns") {
		t.Errorf("-h prints a marker default: %s", usage.String())
	}
}
