package main

import (
	"errors"
	"flag"
	"strings"
	"testing"
	"time"
)

// flagCase is flags and the error they must give ("": accepted).
type flagCase struct {
	args    []string
	wantErr string
}

// checkFlags parses each case's flags and checks the error.
func checkFlags(t *testing.T, cases []flagCase) {
	t.Helper()
	for _, tc := range cases {
		_, err := parseFlags(tc.args)
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%q: %v", tc.args, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%q: got error %v, want one containing %q", tc.args, err, tc.wantErr)
		}
	}
}

func TestParseFlagsFloor(t *testing.T) {
	checkFlags(t, []flagCase{
		{[]string{"-mode", "compare"}, ""},
		{[]string{"-mode", "compare", "-floor", "127.0.0.1:8899", "-floor-pid", "42"}, ""},
		{[]string{"-mode", "floor", "-floor", "localhost:8899"}, ""},
		{[]string{"-mode", "floor"}, "-mode floor needs -floor"},
		{[]string{"-mode", "compare", "-floor", "10.1.2.3:8899"}, "-floor: \"10.1.2.3\" is not a loopback address"},
		{[]string{"-floor", "nonsense"}, "-floor:"},
	})
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

// Flags that would make a run send nothing, print NaN or run the bench
// out of memory are refused up front, each naming its flag. Before, a
// rate run of no report printed "conserved true" and exited 0, and
// -rate 1e12 or -c 1000000000 ended in an out-of-memory crash.
func TestDegenerateFlagsAreRefused(t *testing.T) {
	checkFlags(t, []flagCase{
		{[]string{"-mode", "rate", "-rate", "100", "-d", "1s"}, ""},
		{[]string{"-mode", "rate", "-rate", "100", "-d", "0", "-n", "5"}, ""},
		{[]string{"-mode", "rate", "-rate", "100", "-d", "-1s", "-n", "50"}, "-d must not be negative"},
		{[]string{"-mode", "rate", "-rate", "1e-9", "-d", "1s"}, "comes to no report"},
		{[]string{"-mode", "rate", "-rate", "100", "-d", "1ns"}, "comes to no report"},
		{[]string{"-rate", "NaN"}, "-rate must be > 0"},
		{[]string{"-rate", "Inf"}, "-rate must be > 0"},
		{[]string{"-rate", "1e12"}, "-rate must be > 0 and at most 1000000"},
		{[]string{"-rate", "0"}, "-rate must be > 0"},
		{[]string{"-c", "1000000000"}, "-c must be 1..10000"},
		{[]string{"-c", "0"}, "-c must be 1..10000"},
		{[]string{"-n", "-1"}, "-n must not be negative"},
		{[]string{"-keys", "-5"}, "-keys must be 0..10000000"},
		{[]string{"-keys", "10000000000"}, "-keys must be 0..10000000"},
		{[]string{"-memory", "-windows", "0"}, "-windows must be 1..10000000"},
		{[]string{"-memory", "-windows", "-5"}, "-windows must be 1..10000000"},
		{[]string{"-memory", "-windows", "100000000000"}, "-windows must be 1..10000000"},
		{[]string{"-curve", "-probe", "0"}, "-probe must be 1..10000000"},
		{[]string{"-shards", "0"}, "-shards must be 1..1024"},
		{[]string{"-shards", "1000000000"}, "-shards must be 1..1024"},
		{[]string{"-reporter-conc", "0"}, "-reporter-conc must be 1..10000"},
		{[]string{"-reporter-conc", "1000000000"}, "-reporter-conc must be 1..10000"},
		{[]string{"-shards", "1024", "-reporter-conc", "10000", "-keys", "10000000", "-memory", "-windows", "10000000"}, ""},
		{[]string{"-window", "0"}, "-window must be > 0"},
		{[]string{"-grace", "-1ms"}, "-grace must not be negative"},
		{[]string{"-settle", "-1ms"}, "-settle must not be negative"},
		{[]string{"-reporter-linger", "-1ms"}, "-reporter-linger must not be negative"},
		{[]string{"-wait-clean", "-1s"}, "-wait-clean must not be negative"},
	})
}
