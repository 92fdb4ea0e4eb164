package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A file the plot cannot read whole is an error naming the file and, when
// one field is at fault, that field: not a run dropped without a word (the
// median then stands on fewer runs), nor the complaint of a document shape
// the file does not have. Before, a compare object with a bad field read as
// one empty run and was dropped, a list with one was reported as "cannot
// unmarshal array into main.run", and an empty file was taken as no runs.
func TestBadInputIsAnErrorNamingFileAndField(t *testing.T) {
	const good = `{"mode":"rate","offered_windows_per_s":500,"reports_per_s":500,"pushes":{"windows_missing":0,"push_lag":{"p50_ms":1,"p99_ms":2,"max_ms":3}}}`
	for _, c := range []struct {
		name, doc string
		want      []string // in the error, beside the file's name
	}{
		{"a list's run with a rate in quotes", "[" + strings.Replace(good, `:500,"reports`, `:"500","reports`, 1) + "]", []string{"offered_windows_per_s"}},
		{"a compare object's run with a lag in quotes", `{"runs":[` + strings.Replace(good, `"p99_ms":2`, `"p99_ms":"2"`, 1) + `]}`, []string{"p99_ms"}},
		{"one run with a lag in quotes", strings.Replace(good, `"max_ms":3`, `"max_ms":"3"`, 1), []string{"max_ms"}},
		{"a run cut short", "[" + good[:60], []string{"unexpected EOF"}},
		{"a document neither list nor object", `"rate"`, nil},
		{"an empty file", "", []string{"no JSON document"}},
	} {
		dir := t.TempDir()
		ok, bad := filepath.Join(dir, "rate-500-1.json"), filepath.Join(dir, "rate-500-2.json")
		if err := os.WriteFile(ok, []byte("["+good+"]"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(bad, []byte(c.doc), 0o644); err != nil {
			t.Fatal(err)
		}
		runs, err := readRuns([]string{ok, bad})
		if err == nil {
			t.Errorf("%s: read %d runs, no error", c.name, len(runs))
			continue
		}
		for _, w := range append([]string{bad}, c.want...) {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not name %q", c.name, err, w)
			}
		}
	}
	if _, err := readRuns([]string{filepath.Join(t.TempDir(), "rate-500-9.json")}); err == nil || !strings.Contains(err.Error(), "rate-500-9.json") {
		t.Errorf("a file that is not there: error %v, want one naming it", err)
	}
}
