package main

import (
	"errors"
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
	if exitNotConserved == 0 || exitNotConserved == 1 || exitNotConserved == 2 {
		t.Fatalf("exit status %d for not conserved is taken by success, failure or misuse", exitNotConserved)
	}
}
