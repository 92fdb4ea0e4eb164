// Package testredis starts a real redis-server for tests: on a free port, in
// a temporary directory, stopped when the test ends. Integration tests use it
// instead of mocks so they exercise the Lua scripts and streams for real.
package testredis

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Options tune the server; the zero value is an in-memory Redis.
type Options struct {
	// AppendOnly turns on AOF with appendfsync always, so a killed and
	// restarted server keeps every acknowledged write.
	AppendOnly bool
	// Args are extra redis-server arguments (e.g. "--cluster-enabled", "yes").
	Args []string
	// TLS serves only TLS, with a new CA (Server.TLS), and asks every
	// client for a certificate it signed (tls-auth-clients yes).
	TLS bool
}

// Server is one running redis-server.
type Server struct {
	Addr string
	Port int
	Dir  string
	// TLS is the PKI the server uses when Options.TLS is set.
	TLS  *TLSFiles
	opts Options
	// sentinel is the configuration of a Redis Sentinel (StartSentinel);
	// empty for a Redis.
	sentinel string
	cmd      *exec.Cmd
	tb       testing.TB
}

// require skips the test when a Redis program is not installed and CI is
// not set; under CI a missing program is a failure, never a silent skip.
func require(tb testing.TB, program string) {
	tb.Helper()
	if _, err := exec.LookPath(program); err != nil {
		if os.Getenv("CI") != "" {
			tb.Fatalf("%s not found on PATH under CI: %v", program, err)
		}
		tb.Skipf("%s not installed: %v", program, err)
	}
}

// Start runs redis-server on a free port and registers its stop with t.Cleanup.
// It skips the test when redis-server is not installed and CI is not set;
// under CI a missing server is a failure, never a silent skip.
func Start(tb testing.TB, opts Options) *Server {
	tb.Helper()
	require(tb, "redis-server")
	s := &Server{Dir: tb.TempDir(), opts: opts, tb: tb}
	if opts.TLS {
		f := NewTLSFiles(tb, s.Dir)
		s.TLS = &f
	}
	s.launch(FreePort(tb))
	return s
}

// launch starts s on port of loopback and stops it when the test ends.
func (s *Server) launch(port int) {
	s.tb.Helper()
	// Registered before the start: a start that fails ends in Fatalf, and
	// whatever it left running must still be stopped with the test.
	s.tb.Cleanup(s.Stop)
	s.Port = port
	s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	s.start()
}

func (s *Server) start() {
	s.tb.Helper()
	if err := s.startErr(); err != nil {
		s.tb.Fatalf("testredis: %v", err)
	}
}

// startErr starts the server on s.Port and waits until it answers; on an
// error no process of it is left running.
func (s *Server) startErr() error {
	if s.sentinel != "" {
		return s.startSentinel()
	}
	args := append(s.listenArgs(), "--save", "")
	if s.opts.AppendOnly {
		args = append(args, "--appendonly", "yes", "--appendfsync", "always")
	} else {
		args = append(args, "--appendonly", "no")
	}
	args = append(args, s.opts.Args...)
	return s.run(args)
}

// listenArgs are the redis-server arguments every server and Sentinel
// shares: where it listens and logs, and with a PKI, TLS only, asking each
// client (and, with tls-replication, its master) for a certificate.
func (s *Server) listenArgs() []string {
	port := strconv.Itoa(s.Port)
	if s.TLS != nil {
		port = "0" // TLS only
	}
	args := []string{
		"--port", port, "--bind", "127.0.0.1", "--dir", s.Dir,
		"--daemonize", "no", "--logfile", filepath.Join(s.Dir, "redis.log"),
	}
	if s.TLS != nil {
		args = append(args, "--tls-port", strconv.Itoa(s.Port),
			"--tls-cert-file", s.TLS.ServerCert, "--tls-key-file", s.TLS.ServerKey,
			"--tls-ca-cert-file", s.TLS.CA, "--tls-auth-clients", "yes")
	}
	return args
}

// readyTimeout bounds the wait for a started server to answer; a variable
// so that tests of a server that never answers need not wait it out.
var readyTimeout = 10 * time.Second

// run starts redis-server with args and waits until it answers. When it
// does not, it kills it before returning the error: the caller fails the
// test, and a server left running would outlive the test binary, its
// directory deleted under it.
func (s *Server) run(args []string) error {
	cmd := exec.Command("redis-server", args...)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	s.cmd = cmd
	if err := waitReady(s.options(), readyTimeout); err != nil {
		s.Kill()
		log, _ := os.ReadFile(filepath.Join(s.Dir, "redis.log"))
		return fmt.Errorf("%w\n%s", err, log)
	}
	return nil
}

// Client returns a client for this server, closed when the test ends.
func (s *Server) Client() *redis.Client {
	c := redis.NewClient(s.options())
	s.tb.Cleanup(func() { _ = c.Close() })
	return c
}

// options are a client's for this server: over TLS with the client
// certificate when it serves TLS.
func (s *Server) options() *redis.Options {
	o := &redis.Options{Addr: s.Addr}
	if s.TLS != nil {
		o.TLSConfig = s.TLS.ClientConfig(s.tb)
	}
	return o
}

// Kill stops the server with SIGKILL, as a crash would.
func (s *Server) Kill() { s.signal(syscall.SIGKILL) }

// Stop ends the server gracefully; it is safe to call twice.
func (s *Server) Stop() { s.signal(syscall.SIGTERM) }

func (s *Server) signal(sig syscall.Signal) {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(sig)
	done := make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-done
	}
	s.cmd = nil
}

// Restart starts the server again on the same port and directory (with AOF,
// its data comes back).
func (s *Server) Restart() {
	s.tb.Helper()
	s.Stop()
	s.start()
}

// Start again after Kill or Stop.
func (s *Server) Start() {
	s.tb.Helper()
	s.start()
}

// WaitReady polls addr with PING until it answers or timeout passes.
func WaitReady(addr string, timeout time.Duration) error {
	return waitReady(&redis.Options{Addr: addr}, timeout)
}

func waitReady(o *redis.Options, timeout time.Duration) error {
	addr := o.Addr
	o.MaxRetries, o.DialTimeout = -1, 200*time.Millisecond
	c := redis.NewClient(o)
	defer c.Close()
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis at %s not ready after %s: %w", addr, timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// FreePort asks the kernel for a free TCP port on loopback.
func FreePort(tb testing.TB) int {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("testredis: free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
