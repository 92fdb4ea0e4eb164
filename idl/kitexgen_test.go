// Package idl_test checks that the committed kitex_gen/ is what the kitex
// tool pinned in go.mod (its tool line) makes of combo.thrift, so that an
// edit of either alone, or a tool upgrade without regenerating, fails
// here instead of shipping code that no longer matches its IDL.
package idl_test

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// The command README gives ("Changing the IDL"), run in a scratch copy of
// the module's go.mod, go.sum and IDL, so the working tree is not touched.
func TestKitexGenIsGeneratedFromTheIDL(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the kitex tool")
	}
	dir := t.TempDir()
	for _, f := range []string{"go.mod", "go.sum", "idl/combo.thrift"} {
		b, err := os.ReadFile(filepath.Join("..", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("go", "tool", "kitex", "-module", "github.com/combo-service/combo-service", "idl/combo.thrift")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go tool kitex: %v\n%s", err, out)
	}
	generated, committed := files(t, filepath.Join(dir, "kitex_gen")), files(t, filepath.Join("..", "kitex_gen"))
	for name, b := range generated {
		c, ok := committed[name]
		switch {
		case !ok:
			t.Errorf("kitex_gen/%s: generated from the IDL, not committed", name)
		case !bytes.Equal(b, c):
			t.Errorf("kitex_gen/%s: differs from what the kitex tool makes of the IDL (regenerate it: README, Changing the IDL)", name)
		}
	}
	for name := range committed {
		if _, ok := generated[name]; !ok {
			t.Errorf("kitex_gen/%s: committed, not generated from the IDL", name)
		}
	}
}

// files reads every file under root, by its path relative to root.
func files(t *testing.T, root string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		out[filepath.ToSlash(rel)], err = os.ReadFile(path)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
