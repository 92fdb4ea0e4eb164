package testredis

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// fatalTB is a testing.TB whose Fatal ends only the goroutine that calls
// it, as testing's does, but records the message instead of failing the
// test, and keeps the cleanups for the test to run: so a test can watch the
// helper fail and check what it leaves behind.
type fatalTB struct {
	testing.TB
	dir string // every TempDir is under it

	mu       sync.Mutex
	fatal    string
	cleanups []func()
}

func newFatalTB(t *testing.T) *fatalTB { return &fatalTB{TB: t, dir: t.TempDir()} }

func (f *fatalTB) Helper() {}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.fatal = fmt.Sprintf(format, args...)
	f.mu.Unlock()
	runtime.Goexit()
}

func (f *fatalTB) Fatal(args ...any) { f.Fatalf("%s", fmt.Sprint(args...)) }

func (f *fatalTB) Cleanup(fn func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cleanups = append(f.cleanups, fn)
}

func (f *fatalTB) TempDir() string {
	d, err := os.MkdirTemp(f.dir, "")
	if err != nil {
		f.TB.Fatal(err)
	}
	return d
}

// run calls fn in a goroutine of its own (Fatal ends it), then the
// cleanups it registered, last first, and returns the Fatal message.
func (f *fatalTB) run(fn func()) string {
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	<-done
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := len(f.cleanups) - 1; i >= 0; i-- {
		f.cleanups[i]()
	}
	f.cleanups = nil
	return f.fatal
}

// processesUnder lists the pids of the processes whose working directory
// is under dir: a redis-server changes into its --dir (its command line is
// no help, it rewrites it to its address).
func processesUnder(t *testing.T, dir string) []int {
	t.Helper()
	if _, err := os.Readlink("/proc/self/cwd"); err != nil {
		t.Skipf("no /proc to list processes: %v", err)
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		// A zombie has no working directory: it is gone, only not reaped.
		cwd, err := os.Readlink(filepath.Join("/proc", e.Name(), "cwd"))
		if err == nil && strings.HasPrefix(cwd, dir+string(filepath.Separator)) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// killAll kills what a failing check found, so the test leaks nothing.
func killAll(pids []int) {
	for _, p := range pids {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
}

// A server that never answers PING (here it wants a password the helper
// does not send) fails the start, and is not left running: it used to
// outlive the test binary, as its Stop was registered only after a start
// that succeeded.
func TestStartThatFailsLeavesNoServer(t *testing.T) {
	require(t, "redis-server")
	defer func(d time.Duration) { readyTimeout = d }(readyTimeout)
	readyTimeout = time.Second
	f := newFatalTB(t)
	msg := f.run(func() { Start(f, Options{Args: []string{"--requirepass", "x"}}) })
	if msg == "" {
		t.Fatal("Start of a server that wants a password did not fail")
	}
	if pids := processesUnder(t, f.dir); len(pids) > 0 {
		killAll(pids)
		t.Fatalf("after a failed Start and its cleanups, processes %v still run (Fatal: %s)", pids, msg)
	}
}
