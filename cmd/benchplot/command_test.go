package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// benchplot's exit status is what bench.sh (set -e) goes on: a usage error
// is 2, an input it cannot read or a plot it cannot write is 1 with the
// cause on stderr, and 0 only once the PNG is written, with each point's
// figures on stdout (a p99 printed as max there would mislead as the plot).
func TestCommandExitStatusAndSummary(t *testing.T) {
	dir := t.TempDir()
	write := func(name, doc string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	rate1 := write("rate-500-1.json", `[{"mode":"rate","offered_windows_per_s":500,"reports_per_s":499,"pushes":{"windows_missing":2,"push_lag":{"p50_ms":1.5,"p99_ms":4.25,"max_ms":7}}}]`)
	rate2 := write("rate-500-2.json", `[{"mode":"rate","offered_windows_per_s":500,"reports_per_s":501,"pushes":{"windows_missing":0,"push_lag":{"p50_ms":2.5,"p99_ms":5.25,"max_ms":9}}}]`)
	compare := write("compare-c32-1.json", `{"runs":[{"mode":"naive","reports_per_s":9000}],"ratios":{}}`)
	png := filepath.Join(dir, "push-lag.png")
	for _, c := range []struct {
		name       string
		args       []string
		want       int
		stdout     string // in stdout
		stderr     string // in stderr
		wantOutput bool
	}{
		{"no input", nil, 2, "", "usage: benchplot", false},
		{"an unknown flag", []string{"-x", rate1}, 2, "", "flag provided but not defined: -x", false},
		{"an input not there", []string{"-o", png, rate1, filepath.Join(dir, "rate-500-3.json")}, 1, "", "rate-500-3.json", false},
		{"no rate run in the input", []string{"-o", png, compare}, 1, "", "no rate-mode runs", false},
		{"an output it cannot create", []string{"-o", filepath.Join(dir, "none", "p.png"), rate1}, 1, "", filepath.Join(dir, "none", "p.png"), false},
		{"two runs at one rate", []string{"-o", png, rate1, rate2, compare}, 0,
			"offered    500/s  runs 2  achieved     500/s  lag p50    2.0  p99    4.8  max    8.0 ms  missing 2\nwrote " + png + "\n", "", true},
	} {
		os.Remove(png)
		var stdout, stderr bytes.Buffer
		got := command(c.args, &stdout, &stderr)
		if got != c.want || !strings.Contains(stdout.String(), c.stdout) || !strings.Contains(stderr.String(), c.stderr) {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want exit %d, stdout with %q, stderr with %q",
				c.name, got, stdout.String(), stderr.String(), c.want, c.stdout, c.stderr)
		}
		b, err := os.ReadFile(png)
		if wrote := err == nil; wrote != c.wantOutput || wrote && !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) {
			t.Errorf("%s: output %q written %v (%d bytes, read error %v), want written %v, a PNG", c.name, png, wrote, len(b), err, c.wantOutput)
		}
	}
}
