package rpcserver

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cloudwego/netpoll"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// When accepts fail for want of file descriptors, netpoll logs, and goes
// on logging as it retries: those lines are the service's logger's, at
// warn, sampled; none go to stderr. The process's descriptors run out,
// so this runs in a process of its own.
func TestNetpollLogsThroughTheServiceLogger(t *testing.T) {
	if os.Getenv("RPCSERVER_TEST_EMFILE") == "" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestNetpollLogsThroughTheServiceLogger$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), "RPCSERVER_TEST_EMFILE=1")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		if err != nil || !strings.Contains(stdout.String(), "--- PASS") {
			t.Fatalf("child: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
		}
		if strings.Contains(stderr.String(), "NETPOLL") {
			t.Errorf("netpoll wrote to stderr:\n%s", stderr.String())
		}
		return
	}

	// Left set: this process ends with this test, and netpoll's retries
	// go on after it (on a listener shut down, they fail "bad file
	// descriptor" every second, without end).
	core, logs := observer.New(zapcore.DebugLevel)
	SetNetpollLogger(zap.New(core, zap.AddCaller()))

	ln, err := netpoll.CreateListener("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	connected := make(chan struct{}, 4)
	loop, err := netpoll.NewEventLoop(func(context.Context, netpoll.Connection) error { return nil },
		netpoll.WithOnConnect(func(ctx context.Context, _ netpoll.Connection) context.Context {
			connected <- struct{}{}
			return ctx
		}))
	if err != nil {
		t.Fatal(err)
	}
	go loop.Serve(ln)
	defer loop.Shutdown(context.Background()) //nolint:errcheck
	first, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	select { // the server takes connections
	case <-connected:
	case <-time.After(5 * time.Second):
		t.Fatal("the event loop took no connection")
	}

	// Run out of descriptors: a low limit, filled with /dev/null.
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd:", err)
	}
	highest := 0
	for _, e := range entries {
		if n, err := strconv.Atoi(e.Name()); err == nil && n > highest {
			highest = n
		}
	}
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	low := old
	low.Cur = uint64(highest + 16)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	defer syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old) //nolint:errcheck
	var fds []int
	defer func() {
		for _, fd := range fds {
			syscall.Close(fd)
		}
	}()
	for {
		fd, err := syscall.Open("/dev/null", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
		if errors.Is(err, syscall.EMFILE) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		fds = append(fds, fd)
	}
	// One descriptor free, for a client: the server cannot accept it.
	syscall.Close(fds[len(fds)-1])
	fds = fds[:len(fds)-1]
	second, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()

	lines := func(kind string) []observer.LoggedEntry {
		return logs.FilterMessageSnippet(kind).All()
	}
	waitFor := func(kind string) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); len(lines(kind)) == 0; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("no %q line; logged: %v", kind, logs.All())
			}
		}
	}
	waitFor("NETPOLL: accept conn failed: too many open files")
	// netpoll retries after 0, 10, 50, 100, 200 and 500 ms, logging each
	// failure: the first is written, the others fall in its second.
	time.Sleep(1200 * time.Millisecond)
	failed := lines("NETPOLL: re-accept conn failed")
	if len(failed) == 0 {
		t.Fatal("no re-accept failure written")
	}
	inFirstSecond := 0
	for _, e := range failed {
		if e.Time.Sub(failed[0].Time) < time.Second {
			inFirstSecond++
		}
	}
	if inFirstSecond != 1 {
		t.Errorf("%d re-accept failures written in a second, want 1 (sampled)", inFirstSecond)
	}
	// A descriptor freed: the next retry takes the connection.
	syscall.Close(fds[len(fds)-1])
	fds = fds[:len(fds)-1]
	waitFor("NETPOLL: re-accept conn success: 127.0.0.1:")

	for _, e := range logs.All() {
		if e.Level != zapcore.WarnLevel || e.LoggerName != "netpoll" || !strings.HasPrefix(e.Message, "NETPOLL: ") {
			t.Errorf("%q: level %s, logger %q; want warn, netpoll, netpoll's text without its date", e.Message, e.Level, e.LoggerName)
		}
		if !strings.Contains(e.Caller.File, "cloudwego/netpoll") {
			t.Errorf("%q: caller %s, want netpoll's code", e.Message, e.Caller)
		}
	}
	t.Logf("logged: %d lines; %v", logs.Len(), logs.All())
}
