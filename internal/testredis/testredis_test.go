package testredis

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
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

// startOther starts a redis-server by hand on port, as another package's
// test would, with the key "owner" set to "other".
func startOther(t *testing.T, port int) *redis.Client {
	t.Helper()
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--dir", t.TempDir(), "--save", "", "--appendonly", "no", "--daemonize", "no")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	if err := WaitReady(addr, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = c.Close() })
	if err := c.Set(context.Background(), "owner", "other", 0).Err(); err != nil {
		t.Fatal(err)
	}
	return c
}

// firstThen picks port first, then free ports.
func firstThen(port int) func(testing.TB) int {
	first := true
	return func(tb testing.TB) int {
		if first {
			first = false
			return port
		}
		return FreePort(tb)
	}
}

// checkOwn fails the test unless s is served by the redis-server it
// started, which does not see the other server's key.
func checkOwn(t *testing.T, s *Server, taken int) {
	t.Helper()
	if s.Port == taken {
		t.Fatalf("server on port %d, the port another process holds", taken)
	}
	c := s.Client()
	ctx := context.Background()
	if v, err := c.Get(ctx, "owner").Result(); err != redis.Nil {
		t.Fatalf("GET owner on our server: %q, %v; want redis.Nil (it is the other server)", v, err)
	}
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := infoField(info, "process_id"), strconv.Itoa(s.cmd.Process.Pid); got != want {
		t.Fatalf("our server answers as process %s; want %s", got, want)
	}
}

// When another redis-server took the free port first, our redis-server
// could not bind it and exited, but the start took the other server's PONG
// as its own: the test ran on someone else's Redis. It now moves on to
// another port.
func TestLaunchOnPortOfAnotherRedisMovesOn(t *testing.T) {
	require(t, "redis-server")
	port := FreePort(t)
	other := startOther(t, port)
	s := &Server{Dir: t.TempDir(), tb: t}
	s.launch(firstThen(port))
	checkOwn(t, s, port)
	if v, err := other.Get(context.Background(), "owner").Result(); err != nil || v != "other" {
		t.Fatalf("the other server's key: %q, %v; want \"other\"", v, err)
	}
}

// A port held by something that is not Redis never answers PING: our
// redis-server exits at once, and the start sees it exit (rather than
// waiting out the ready timeout) and moves on to another port.
func TestLaunchOnPortHeldByNonRedisMovesOn(t *testing.T) {
	require(t, "redis-server")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() { // accept and never answer
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	defer func(d time.Duration) { readyTimeout = d }(readyTimeout)
	readyTimeout = 5 * time.Second
	port := l.Addr().(*net.TCPAddr).Port
	s := &Server{Dir: t.TempDir(), tb: t}
	start := time.Now()
	s.launch(firstThen(port))
	if s.Port == port {
		t.Fatalf("server on port %d, the port the listener holds", port)
	}
	// Both starts take well under a second; a start that did not watch its
	// child waited out the ready timeout on the held port first.
	if d := time.Since(start); d >= readyTimeout {
		t.Fatalf("launch took %s, the ready timeout (%s) or more: it did not see its redis-server exit", d, readyTimeout)
	}
}

// A restart keeps its port: when another redis-server took it after Kill,
// Start fails naming the port, and leaves the other server's data alone.
func TestStartAgainOnTakenPortFails(t *testing.T) {
	require(t, "redis-server")
	s := Start(t, Options{})
	s.Kill()
	other := startOther(t, s.Port)
	f := newFatalTB(t)
	s.tb = f
	msg := f.run(s.Start)
	if !strings.Contains(msg, "port "+strconv.Itoa(s.Port)) || !strings.Contains(msg, errPortTaken.Error()) {
		t.Fatalf("Start again on a taken port: Fatal %q; want it to name port %d as taken", msg, s.Port)
	}
	if v, err := other.Get(context.Background(), "owner").Result(); err != nil || v != "other" {
		t.Fatalf("the other server's key: %q, %v; want \"other\"", v, err)
	}
	if pids := processesUnder(t, s.Dir); len(pids) > 0 {
		killAll(pids)
		t.Fatalf("after a failed Start, processes %v still run", pids)
	}
}

// The log of an earlier start in the directory (one that lost its port) is
// not the new start's: a server that fails for another reason is not
// taken for one that lost its port, and not retried on other ports.
func TestStartFailureIsNotBlamedOnAnEarlierLog(t *testing.T) {
	require(t, "redis-server")
	f := newFatalTB(t)
	s := &Server{Dir: t.TempDir(), tb: f, opts: Options{Args: []string{"--no-such-option", "x"}}}
	earlier := "# Warning: Could not create server TCP listening socket 127.0.0.1:1: bind: Address already in use\n"
	if err := os.WriteFile(filepath.Join(s.Dir, "redis.log"), []byte(earlier), 0o600); err != nil {
		t.Fatal(err)
	}
	msg := f.run(func() { s.launch(FreePort) })
	if !strings.Contains(msg, "exited before it answered") || strings.Contains(msg, errPortTaken.Error()) {
		t.Fatalf("start with a bad option: Fatal %q; want it to exit, not to have lost its port", msg)
	}
}

// A test binary killed (as by -timeout's panic) takes its redis-servers
// with it: this test runs itself as a child that starts a server and
// waits, kills the child, and waits for the server to go.
func TestServerDiesWithTestBinary(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("a parent-death signal is Linux's")
	}
	require(t, "redis-server")
	if os.Getenv("TESTREDIS_DEATH_CHILD") == "1" {
		s := Start(t, Options{})
		fmt.Printf("testredis-pid %d\n", s.cmd.Process.Pid)
		_, _ = io.Copy(io.Discard, os.Stdin) // until killed (or the parent goes)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestServerDiesWithTestBinary$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "TESTREDIS_DEATH_CHILD=1")
	stdin, err := cmd.StdinPipe() // held open: the child waits on it
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	pid := 0
	var lines []string
	for sc := bufio.NewScanner(out); pid == 0 && sc.Scan(); {
		lines = append(lines, sc.Text())
		_, _ = fmt.Sscanf(sc.Text(), "testredis-pid %d", &pid)
	}
	if pid == 0 {
		t.Fatalf("the child printed no server pid:\n%s", strings.Join(lines, "\n"))
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	// The server is no child of ours: nothing signals its end, so poll.
	deadline := time.Now().Add(10 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("redis-server %d still runs 10 s after its test binary was killed", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// alive reports whether process pid runs: a zombie is gone, only not
// reaped yet by whoever inherited it.
func alive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name, in parentheses: "pid (comm) S ...".
	i := bytes.LastIndexByte(stat, ')')
	return i < 0 || i+2 >= len(stat) || stat[i+2] != 'Z'
}

// Three Sentinels, quorum two, fail a paused master over to its replica:
// they know each other and the replica when StartSentinels returns.
func TestStartSentinelsFailOverAPausedMaster(t *testing.T) {
	master := Start(t, Options{})
	replica := StartReplica(t, master)
	ss := StartSentinels(t, 3, "m", master)
	ctx := context.Background()
	if q := sentinelField(t, ss[0], "m", "quorum"); q != "2" {
		t.Fatalf("quorum %s, want 2", q)
	}
	for _, s := range ss { // as soon as StartSentinels returns
		if n := sentinelField(t, s, "m", "num-other-sentinels"); n != "2" {
			t.Errorf("Sentinel %s knows %s other Sentinels, want 2", s.Addr, n)
		}
		if n := sentinelField(t, s, "m", "num-slaves"); n != "1" {
			t.Errorf("Sentinel %s knows %s replicas, want 1", s.Addr, n)
		}
	}
	master.Pause()
	paused := time.Now()
	for _, s := range ss {
		for {
			addr, err := s.Client().Do(ctx, "SENTINEL", "get-master-addr-by-name", "m").StringSlice()
			if err == nil && len(addr) == 2 && addr[0]+":"+addr[1] == replica.Addr {
				break
			}
			if time.Since(paused) > 10*time.Second {
				t.Fatalf("Sentinel %s names %v (%v) 10 s after the pause, want %s", s.Addr, addr, err, replica.Addr)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	t.Logf("every Sentinel names the replica %v after the pause", time.Since(paused))
}

// sentinelField is a field of what Sentinel s says of the master name.
func sentinelField(t *testing.T, s *Server, name, field string) string {
	t.Helper()
	sc := redis.NewSentinelClient(s.options())
	defer sc.Close()
	m, err := sc.Master(context.Background(), name).Result()
	if err != nil {
		t.Fatal(err)
	}
	return m[field]
}
