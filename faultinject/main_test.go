//go:build unix

package faultinject

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudwego/kitex/pkg/klog"
)

func TestMain(m *testing.M) {
	// The test process is a Kitex client that watches replicas die: its
	// dial and read failures are expected and handled by the load generator.
	klog.SetLevel(klog.LevelFatal)
	nextID.Store(time.Now().UnixNano() / 1000)
	code := m.Run()
	writeSummary()
	if build.dir != "" {
		_ = os.RemoveAll(build.dir)
	}
	os.Exit(code)
}

// nextID hands out contribution ids unique within the test binary.
var nextID atomic.Int64

func newID() int64 { return nextID.Add(1) }

// build is the service binary, built once per test binary, on first use.
var build struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// serviceBinary returns the path of the combo-service binary built from
// this module (go build, no -race: the suite tests the service's logic
// across processes, and the race detector would only slow the replicas).
func serviceBinary(t *testing.T) string {
	t.Helper()
	build.once.Do(func() {
		root, err := moduleRoot()
		if err != nil {
			build.err = err
			return
		}
		build.dir, err = os.MkdirTemp("", "faultinject-bin-")
		if err != nil {
			build.err = err
			return
		}
		build.path = filepath.Join(build.dir, "combo-service")
		cmd := exec.Command(goTool(), "build", "-o", build.path, ".")
		cmd.Dir = root
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		start := time.Now()
		if err := cmd.Run(); err != nil {
			build.err = fmt.Errorf("go build -o %s %s: %v\n%s", build.path, root, err, out.String())
			return
		}
		fmt.Printf("faultinject: built %s from %s in %s\n", build.path, root, time.Since(start).Round(time.Millisecond))
	})
	if build.err != nil {
		t.Fatalf("build the service: %v", build.err)
	}
	return build.path
}

// moduleRoot is the directory of this module's go.mod: `go env GOMOD`, or
// failing that the parent of this file's directory.
func moduleRoot() (string, error) {
	out, err := exec.Command(goTool(), "env", "GOMOD").Output()
	if gomod := strings.TrimSpace(string(out)); err == nil && gomod != "" && gomod != os.DevNull {
		return filepath.Dir(gomod), nil
	}
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", fmt.Errorf("cannot locate the module root (go env GOMOD: %v)", err)
	}
	root := filepath.Dir(filepath.Dir(file))
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		return "", fmt.Errorf("cannot locate the module root: %w", err)
	}
	return root, nil
}

func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	if root := os.Getenv("GOROOT"); root != "" {
		return filepath.Join(root, "bin", "go")
	}
	return "go"
}

// The summary table: one row per scenario that ran, printed after the run
// and written to $FAULTINJECT_SUMMARY if set.
type summaryRow struct {
	order    int
	scenario string
	outcome
	// t is read for whether it failed when the table is made, once every
	// test is over: a cleanup registered before record's (the cluster's
	// shutdown, which fails the test on a replica's panic or data race in
	// its log) runs after it, so record's own cleanup was too early.
	t *testing.T
}

var summary struct {
	mu   sync.Mutex
	rows []summaryRow
}

// delayHeader names how "max push delay" is measured.
const delayHeader = "max push delay (received − (earliest ack of its window's reports + W + grace))"

// record adds t's row; whether t failed is read when the table is made.
func record(t *testing.T, order int, scenario string, o outcome) {
	t.Logf("summary: %s: reports=%d windows=%d lost=%d duplicated=%d max push delay=%s",
		scenario, o.reports, o.windows, o.lost, o.duplicated, fmtDelay(o.maxDelay))
	summary.mu.Lock()
	defer summary.mu.Unlock()
	summary.rows = append(summary.rows, summaryRow{order: order, scenario: scenario, outcome: o, t: t})
}

func fmtDelay(d time.Duration) string { return fmt.Sprintf("%d ms", d.Milliseconds()) }

func summaryTable() string {
	summary.mu.Lock()
	rows := append([]summaryRow(nil), summary.rows...)
	summary.mu.Unlock()
	if len(rows) == 0 {
		return ""
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].order < rows[j].order })
	var b strings.Builder
	fmt.Fprintf(&b, "| scenario | reports | windows | lost | duplicated | %s |\n", delayHeader)
	b.WriteString("|---|--:|--:|--:|--:|--:|\n")
	for _, r := range rows {
		name := r.scenario
		if r.t.Failed() {
			name += " (FAILED)"
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %s |\n", name, r.reports, r.windows, r.lost, r.duplicated, fmtDelay(r.maxDelay))
	}
	for _, r := range rows {
		if strings.Contains(r.scenario, "²") {
			b.WriteString("\n" + heldOffNote + "\n")
			break
		}
	}
	return b.String()
}

// heldOffNote is the footnote of a scenario marked ² (README's table
// carries the same one).
const heldOffNote = "² through a proxy cut 300 ms before the kill and restored once the test's " +
	"subscriber has subscribed again: the scenario measures the service, not the " +
	"pushes pub/sub drops while a subscriber reconnects."

func writeSummary() {
	table := summaryTable()
	if table == "" {
		return
	}
	fmt.Printf("\nfaultinject summary (W = window.size, grace = window.grace of the scenario):\n\n%s\n", table)
	if path := os.Getenv("FAULTINJECT_SUMMARY"); path != "" {
		if err := os.WriteFile(path, []byte(table), 0o644); err != nil {
			fmt.Fprintf(os.Stderr, "faultinject: write %s: %v\n", path, err)
		}
	}
}
