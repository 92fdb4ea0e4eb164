package main

import (
	"errors"
	"strings"
	"testing"
)

// A run whose pushes were not conserved ends with its own exit status
// (3), after its output: a script running the bench directly sees the
// failure. Before, it exited 0 and only bench.sh's jq check caught it.
func TestNotConservedIsAnError(t *testing.T) {
	ok, bad := &pushCheck{Conserved: true}, &pushCheck{}
	for _, c := range []struct {
		name string
		out  printable
		want error
	}{
		{"every run conserved", runs{{Pushes: ok}, {Pushes: ok}}, nil},
		{"no run checked pushes (naive)", runs{{}}, nil},
		{"one of two not conserved", runs{{Pushes: ok}, {Pushes: bad}}, errNotConserved},
		{"a comparison's service run not conserved", comparison{Runs: runs{{}, {Pushes: bad}}}, errNotConserved},
		{"a memory fill not conserved", memoryResult{Fill: result{Pushes: bad}}, errNotConserved},
	} {
		if err := conserved(c.out); !errors.Is(err, c.want) || (c.want == nil) != (err == nil) {
			t.Errorf("%s: conserved() = %v, want %v", c.name, err, c.want)
		}
	}
}

// A run's output is printed whole, then its not being conserved ends the
// bench with status 3; any other failure is 1, success 0.
func TestARunNotConservedIsPrintedThenExits3(t *testing.T) {
	var out strings.Builder
	err := printOut(&out, true, runs{{Mode: "single", Pushes: &pushCheck{}}})
	if !errors.Is(err, errNotConserved) || !strings.Contains(out.String(), `"conserved": false`) {
		t.Fatalf("printOut of a run not conserved: %v, output %q; want errNotConserved after the output", err, out.String())
	}
	for _, c := range []struct {
		err  error
		want int
	}{{nil, 0}, {err, 3}, {errors.New("dial tcp: connection refused"), 1}} {
		if got := exitCode(c.err); got != c.want {
			t.Errorf("exitCode(%v) = %d, want %d", c.err, got, c.want)
		}
	}
	out.Reset()
	if err := printOut(&out, true, runs{{Mode: "single", Pushes: &pushCheck{Conserved: true}}}); err != nil {
		t.Fatalf("printOut of a conserved run: %v", err)
	}
}
