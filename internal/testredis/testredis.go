// Package testredis starts a real redis-server for tests: on a free port, in
// a temporary directory, stopped when the test ends. Integration tests use it
// instead of mocks so they exercise the Lua scripts and streams for real.
package testredis

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
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
	// exited is closed once cmd has exited and been reaped (cmd.Wait
	// returned): a start sees a child that died at once without waiting
	// out its timeout, and signal waits on it.
	exited chan struct{}
	// logFrom is the size of redis.log when cmd started: the log of
	// earlier starts in Dir (such as one that lost its port) is not its.
	logFrom int64
	tb      testing.TB
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
	s.launch(StablePort)
	return s
}

// launchAttempts bounds the ports a new server tries: each is lost only to
// another process binding it in the moment between FreePort and the bind.
const launchAttempts = 5

// launch starts s on a port of loopback that pick chooses, and stops it
// when the test ends. A free port is free only until someone binds it, and
// other test binaries start servers in parallel: when another process took
// the port first, launch tries another.
func (s *Server) launch(pick func(testing.TB) int) {
	s.tb.Helper()
	// Registered before the start: a start that fails ends in Fatalf, and
	// whatever it left running must still be stopped with the test.
	s.tb.Cleanup(s.Stop)
	var err error
	for range launchAttempts {
		s.Port = pick(s.tb)
		s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port))
		if err = s.startErr(); !errors.Is(err, errPortTaken) {
			break
		}
	}
	if err != nil {
		s.tb.Fatalf("testredis: %v", err)
	}
}

// start starts s again on its port, which it cannot leave: clients and
// the test know it by that address.
func (s *Server) start() {
	s.tb.Helper()
	if err := s.startErr(); err != nil {
		s.tb.Fatalf("testredis: start again on port %d: %v", s.Port, err)
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
	// A master sends a new replica its data (diskless, Redis 7's default)
	// only after waiting 5 s for more replicas to sync with: a replica's
	// start, and an old master's return as a replica after a failover,
	// took about 5 s instead of 0.2 s. Args may still set it.
	args = append(args, "--repl-diskless-sync-delay", "0")
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

// errPortTaken is the error of a start that lost its port to another
// process.
var errPortTaken = errors.New("port taken by another process")

// run starts redis-server with args and waits until it answers. When it
// does not, it kills it before returning the error: the caller fails the
// test, and a server left running would outlive the test binary, its
// directory deleted under it.
func (s *Server) run(args []string) error {
	cmd := exec.Command("redis-server", args...)
	// A configuration error goes to stderr, not to the log file.
	stderr, err := os.Create(filepath.Join(s.Dir, "redis.stderr"))
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = stderr, stderr
	s.logFrom = 0
	if fi, err := os.Stat(filepath.Join(s.Dir, "redis.log")); err == nil {
		s.logFrom = fi.Size()
	}
	// On Linux it dies with the test binary (spawn_linux.go).
	err = StartChild(cmd)
	_ = stderr.Close() // the child has its own descriptor
	if err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	s.cmd, s.exited = cmd, exited
	if err := s.waitOwn(readyTimeout); err != nil {
		s.Kill()
		return fmt.Errorf("%w\n%s", err, s.output())
	}
	return nil
}

// waitOwn waits until s answers PING, or its process exits, or timeout
// passes. A PONG is not enough: when another process bound the port first,
// our redis-server exits, and the PONG may come from someone else's Redis
// (another package's, under go test ./...), whose data the test would then
// read and wipe. So the server that answers must be our child (INFO's
// process_id); when it is not, or our child died of the port in use, the
// error is errPortTaken.
func (s *Server) waitOwn(timeout time.Duration) error {
	o := s.options()
	// Short timeouts of its own: the context's deadline does not bound the
	// connection's handshake, and a listener that never answers (not a
	// Redis) would hold each try for the default 3 s read timeout.
	o.MaxRetries, o.DialTimeout = -1, 200*time.Millisecond
	o.ReadTimeout, o.WriteTimeout = 200*time.Millisecond, 200*time.Millisecond
	c := redis.NewClient(o)
	defer c.Close()
	pid := strconv.Itoa(s.cmd.Process.Pid)
	deadline := time.After(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err() // PING, not INFO: it fails while the AOF loads
		var info string
		if err == nil {
			info, err = c.Info(ctx, "server").Result()
		}
		cancel()
		if err == nil {
			if got := infoField(info, "process_id"); got != pid {
				return fmt.Errorf("%w: %s is served by process %s, not by our redis-server (%s)", errPortTaken, s.Addr, got, pid)
			}
			return nil
		}
		select {
		case <-s.exited:
			return s.exitErr()
		case <-deadline:
			select { // an exit says more than the timeout
			case <-s.exited:
				return s.exitErr()
			default:
			}
			return fmt.Errorf("redis at %s not ready after %s: %w", s.Addr, timeout, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// exitErr is the error of a start whose redis-server exited before it
// answered: errPortTaken when it could not bind its port.
func (s *Server) exitErr() error {
	if strings.Contains(s.output(), "Address already in use") {
		return fmt.Errorf("%w: redis-server could not bind %s (or its cluster bus port): %v", errPortTaken, s.Addr, s.cmd.ProcessState)
	}
	return fmt.Errorf("redis-server exited before it answered at %s: %v", s.Addr, s.cmd.ProcessState)
}

// infoField is the value of field in the text of INFO.
func infoField(info, field string) string {
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// output is what the server of the last start wrote, to its stderr and
// its log file.
func (s *Server) output() string {
	stderr, _ := os.ReadFile(filepath.Join(s.Dir, "redis.stderr"))
	log, _ := os.ReadFile(filepath.Join(s.Dir, "redis.log"))
	if s.logFrom <= int64(len(log)) {
		log = log[s.logFrom:]
	}
	return string(stderr) + string(log)
}

// Client returns a client for this server, closed when the test ends.
func (s *Server) Client() *redis.Client {
	c := redis.NewClient(s.options())
	s.tb.Cleanup(func() { _ = c.Close() })
	return c
}

// RefusedWhile returns what the server's INFO errorstats read after
// connect ran, when it differs from before ("" when Redis refused
// nothing meanwhile): a client's handshake commands that Redis does not
// have (CLIENT SETINFO before 7.2, CLIENT MAINT_NOTIFICATIONS) show there,
// and nowhere else.
func (s *Server) RefusedWhile(connect func()) string {
	admin := s.Client() // go-redis's defaults: its own handshakes are refused before it first reads
	ctx := context.Background()
	before := admin.Info(ctx, "errorstats").Val()
	connect()
	if after := admin.Info(ctx, "errorstats").Val(); after != before {
		return after + "\nwhere before:\n" + before
	}
	return ""
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

// Pause freezes the server (SIGSTOP) without closing anything: its
// sockets still take connections and commands, which it runs only once
// resumed, as after a VM pause or a long stall. The test's cleanup
// resumes it if the test does not.
func (s *Server) Pause() {
	s.tb.Helper()
	if s.cmd == nil {
		s.tb.Fatal("testredis: Pause of a server not running")
	}
	if sigStop == nil {
		s.tb.Skip("testredis: Pause needs SIGSTOP, which this OS lacks")
	}
	p := s.cmd.Process
	if err := p.Signal(sigStop); err != nil {
		s.tb.Fatal(err)
	}
	s.tb.Cleanup(func() { _ = p.Signal(sigCont) })
}

// Resume lets a paused server run again (SIGCONT).
func (s *Server) Resume() {
	s.tb.Helper()
	if s.cmd == nil {
		s.tb.Fatal("testredis: Resume of a server not running")
	}
	if sigCont == nil {
		s.tb.Skip("testredis: Resume needs SIGCONT, which this OS lacks")
	}
	if err := s.cmd.Process.Signal(sigCont); err != nil {
		s.tb.Fatal(err)
	}
}

// Stop ends the server gracefully; it is safe to call twice.
func (s *Server) Stop() { s.signal(syscall.SIGTERM) }

func (s *Server) signal(sig syscall.Signal) {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(sig)
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
	s.cmd, s.exited = nil, nil
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

// StablePort returns a free loopback port below the kernel's ephemeral
// range, for a server that is stopped and started again on its port
// (Restart, Kill then Start): between the two, no outgoing connection, of
// this test or of a test package running in parallel, can be given it as
// its local port and hold it in TIME_WAIT, failing the restart ("start
// again on port N"). Where the range starts too low to leave room, it is
// FreePort's.
func StablePort(tb testing.TB) int {
	tb.Helper()
	lo := ephemeralLow()
	if lo <= 12000 {
		return FreePort(tb)
	}
	for range 200 {
		p := 10000 + rand.IntN(lo-10000)
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue
		}
		_ = l.Close()
		return p
	}
	return FreePort(tb)
}

// ephemeralLow is the first port of the kernel's ephemeral range.
func ephemeralLow() int {
	data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(data))
	if len(f) != 2 {
		return 32768
	}
	lo, err := strconv.Atoi(f[0])
	if err != nil {
		return 32768
	}
	return lo
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
