//go:build linux

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// libShell runs script in bash with lib.sh sourced under set -euo
// pipefail, as bench.sh and callgrind.sh do, with PATH holding only the
// given programs (each linked into a fresh folder) and the extra ones
// written there as shell scripts.
func libShell(t *testing.T, programs []string, extra map[string]string, script string) (string, error) {
	t.Helper()
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	dir := t.TempDir()
	for _, p := range programs {
		path, err := exec.LookPath(p)
		if err != nil {
			t.Skipf("no %s", p)
		}
		if err := os.Symlink(path, filepath.Join(dir, p)); err != nil {
			t.Fatal(err)
		}
	}
	for name, body := range extra {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!"+bash+"\n"+body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	lib, err := filepath.Abs("lib.sh")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bash, "-c", "set -euo pipefail; . "+lib+"\n"+script)
	cmd.Env = append(os.Environ(), "PATH="+dir)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// callgrind.sh stops when alive says its redis-server is gone: without ps
// (a slim container) it said so of a server still starting, at once.
func TestAliveWithoutPs(t *testing.T) {
	out, err := libShell(t, []string{"sleep", "cat"}, nil, `
sleep 30 & p=$!
trap 'kill "$p" 2>/dev/null || true' EXIT
alive "$p" || { echo "running: not alive"; exit 1; }
kill "$p"
# Not waited for, so a zombie once it has exited: alive must say so
# (within 10 s, however loaded the machine).
for ((i = 0; i < 100; i++)); do alive "$p" || break; sleep 0.1; done
if alive "$p"; then echo "exited (a zombie): alive"; exit 1; fi
wait "$p" || true
if alive "$p"; then echo "reaped: alive"; exit 1; fi
echo ok`)
	if err != nil || strings.TrimSpace(out) != "ok" {
		t.Fatalf("alive without ps: %v\n%s", err, out)
	}
}

// An ss without -H (iproute2 before 4.12) stopped bench.sh at once, with
// no word but ss's usage: free_ports gave it no ports.
func TestFreePortsWithAnOlderSs(t *testing.T) {
	ss, err := exec.LookPath("ss")
	if err != nil {
		t.Skip("no ss")
	}
	oldSs := `for a in "$@"; do case "$a" in -*H*) echo "ss: invalid option -- 'H'" >&2; exit 255;; esac; done
exec ` + ss + ` "$@"
`
	out, err := libShell(t, []string{"shuf", "awk", "grep", "cat", "sort"}, map[string]string{"ss": oldSs}, `
read -r a b c < <(free_ports 3)
[ -n "$c" ] && [ "$a" != "$b" ] && [ "$b" != "$c" ] && [ "$a" != "$c" ] || { echo "ports: $a $b $c"; exit 1; }
echo ok`)
	if err != nil || strings.TrimSpace(out) != "ok" {
		t.Fatalf("free_ports 3 with an ss without -H: %v\n%s", err, out)
	}
}
