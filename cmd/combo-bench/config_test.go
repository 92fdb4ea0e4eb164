package main

import (
	"strings"
	"testing"
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
