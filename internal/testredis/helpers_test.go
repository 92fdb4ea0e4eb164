package testredis

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/combo-service/combo-service/internal/stacks"
	"github.com/combo-service/combo-service/internal/testwait"
)

// The helpers below are what every test of the service trusts: these
// tests pin what their doc comments promise, so that a helper that
// silently did less (a config the test did not ask for, a proxy that
// does not hand serve its connections, a wait that never finds what it
// looks for) fails here rather than letting the service's tests pass
// without testing anything.

// configOf is CONFIG GET param on the server c talks to.
func configOf(t *testing.T, c *redis.Client, param string) string {
	t.Helper()
	got, err := c.ConfigGet(context.Background(), param).Result()
	if err != nil {
		t.Fatal(err)
	}
	return got[param]
}

// Start runs the Redis the options ask for: in memory (no snapshot, no
// AOF) by default, AOF fsynced at every write with AppendOnly, and the
// test's own Args over the defaults.
func TestStartRunsTheRedisItsOptionsAsk(t *testing.T) {
	require(t, "redis-server")
	for _, tc := range []struct {
		name string
		opts Options
		want map[string]string
	}{
		{"zero", Options{}, map[string]string{"save": "", "appendonly": "no", "repl-diskless-sync-delay": "0", "port": "", "bind": "127.0.0.1"}},
		{"AppendOnly", Options{AppendOnly: true}, map[string]string{"save": "", "appendonly": "yes", "appendfsync": "always"}},
		{"Args", Options{Args: []string{"--appendonly", "yes", "--save", "3600 1", "--maxmemory-policy", "allkeys-lru"}},
			map[string]string{"save": "3600 1", "appendonly": "yes", "maxmemory-policy": "allkeys-lru"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := Start(t, tc.opts)
			c := s.Client()
			tc.want["port"] = fmt.Sprint(s.Port)
			for param, want := range tc.want {
				if got := configOf(t, c, param); got != want {
					t.Errorf("CONFIG GET %s: %q, want %q", param, got, want)
				}
			}
		})
	}
}

// Kill is a crash: the server writes nothing on its way out, where Stop
// lets it save (here to a snapshot the test's Args ask for).
func TestKillIsACrashAndStopIsNot(t *testing.T) {
	require(t, "redis-server")
	ctx := context.Background()
	s := Start(t, Options{Args: []string{"--save", "3600 1"}})
	dump := filepath.Join(s.Dir, "dump.rdb")
	if err := s.Client().Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	s.Kill()
	if _, err := os.Stat(dump); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("after Kill, %s: %v; want no snapshot, as after a crash", dump, err)
	}
	s.Start()
	c := s.Client()
	if err := c.Get(ctx, "k").Err(); err != redis.Nil {
		t.Fatalf("GET k after Kill and Start: %v, want redis.Nil", err)
	}
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	s.Stop()
	if _, err := os.Stat(dump); err != nil {
		t.Fatalf("after Stop, %s: %v; want the snapshot a graceful shutdown writes", dump, err)
	}
}

// A paused server answers nothing until resumed, and one the test left
// paused is resumed by the cleanup before its Stop, which would otherwise
// wait 10 s for a stopped process to end.
func TestPauseHoldsTheServerUntilResume(t *testing.T) {
	require(t, "redis-server")
	var s *Server
	start := time.Now()
	t.Run("paused", func(t *testing.T) {
		s = Start(t, Options{})
		c := s.Client()
		if err := c.Ping(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
		s.Pause()
		// go-redis bounds a read by ReadTimeout, not by the context's deadline.
		short := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, ReadTimeout: 200 * time.Millisecond})
		defer short.Close()
		if err := short.Ping(context.Background()).Err(); err == nil {
			t.Fatal("a paused server answered PING")
		}
		s.Resume()
		if err := c.Ping(context.Background()).Err(); err != nil {
			t.Fatalf("PING after Resume: %v", err)
		}
		s.Pause() // left paused: the cleanups resume and stop it
	})
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("a test that left its server paused took %s to end: its cleanup did not resume it", d)
	}
	if s.cmd != nil {
		t.Fatal("the server still runs after its test ended")
	}
}

// A TLS server serves TLS only, and only to clients with a certificate
// of its CA.
func TestTLSServerServesOnlyCertifiedTLSClients(t *testing.T) {
	require(t, "redis-server")
	s := Start(t, Options{TLS: true})
	ctx := context.Background()
	for param, want := range map[string]string{"port": "0", "tls-port": fmt.Sprint(s.Port), "tls-auth-clients": "yes"} {
		if got := configOf(t, s.Client(), param); got != want {
			t.Errorf("CONFIG GET %s: %q, want %q", param, got, want)
		}
	}
	noCert := s.TLS.ClientConfig(t)
	noCert.Certificates = nil
	for name, o := range map[string]*redis.Options{
		"plain TCP":             {Addr: s.Addr},
		"TLS with no cert":      {Addr: s.Addr, TLSConfig: noCert},
		"TLS with another cert": {Addr: s.Addr, TLSConfig: NewTLSFiles(t, t.TempDir()).ClientConfig(t)},
	} {
		o.MaxRetries, o.DialTimeout, o.ReadTimeout = -1, time.Second, time.Second
		c := redis.NewClient(o)
		err := c.Ping(ctx).Err()
		_ = c.Close()
		if err == nil {
			t.Errorf("%s: PING answered; want the server to refuse it", name)
		}
	}
}

// ClientConfig verifies the server against its CA: a server with a
// certificate of another CA fails the handshake.
func TestClientConfigVerifiesTheServer(t *testing.T) {
	ours, other := NewTLSFiles(t, t.TempDir()), NewTLSFiles(t, t.TempDir())
	cert, err := tls.LoadX509KeyPair(other.ServerCert, other.ServerKey)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.(*tls.Conn).Handshake()
			_ = c.Close()
		}
	}()
	d := &net.Dialer{Timeout: 5 * time.Second}
	if c, err := tls.DialWithDialer(d, "tcp", ln.Addr().String(), ours.ClientConfig(t)); err == nil {
		_ = c.Close()
		t.Fatal("ClientConfig accepted a server certificate of another CA")
	}
	c, err := tls.DialWithDialer(d, "tcp", ln.Addr().String(), other.ClientConfig(t))
	if err != nil {
		t.Fatalf("ClientConfig of the server's own CA: %v", err)
	}
	_ = c.Close()
}

// NewTLSFilesUntil's certificates expire when it says, not later.
func TestNewTLSFilesUntilExpiresThen(t *testing.T) {
	at := time.Now().Add(90 * time.Minute).Truncate(time.Second)
	f := NewTLSFilesUntil(t, t.TempDir(), at)
	for _, file := range []string{f.CA, f.ServerCert, f.ClientCert} {
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		block, _ := pem.Decode(raw)
		if block == nil {
			t.Fatalf("%s holds no PEM", file)
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		if !cert.NotAfter.Equal(at) {
			t.Errorf("%s expires at %s, want %s", filepath.Base(file), cert.NotAfter, at)
		}
	}
}

// WaitReady fails, once its timeout passes, on an address no Redis
// answers at.
func TestWaitReadyFailsWhereNoRedisAnswers(t *testing.T) {
	start := time.Now()
	if err := WaitReady(ClosedAddr(t), 300*time.Millisecond); err == nil {
		t.Fatal("WaitReady of a closed address returned no error")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("WaitReady of 300 ms took %s", d)
	}
}

// StablePort is below the kernel's ephemeral range, where no outgoing
// connection is given it.
func TestStablePortIsBelowTheEphemeralRange(t *testing.T) {
	lo := ephemeralLow()
	if lo <= 12000 {
		t.Skipf("ephemeral range starts at %d: StablePort is FreePort's", lo)
	}
	for range 20 {
		if p := StablePort(t); p < 10000 || p >= lo {
			t.Fatalf("StablePort %d, want it in [10000, %d)", p, lo)
		}
	}
}

// RefusedWhile reports a command Redis refused while connect ran, and
// nothing when it refused none.
func TestRefusedWhileSeesARefusal(t *testing.T) {
	require(t, "redis-server")
	s := Start(t, Options{})
	ctx := context.Background()
	c := s.Client()
	if err := c.Ping(ctx).Err(); err != nil { // its handshake before RefusedWhile
		t.Fatal(err)
	}
	if got := s.RefusedWhile(func() { _ = c.Ping(ctx).Err() }); got != "" {
		t.Errorf("RefusedWhile of a PING: %q, want \"\"", got)
	}
	if got := s.RefusedWhile(func() { _ = c.Do(ctx, "NO-SUCH-COMMAND").Err() }); !strings.Contains(got, "errorstat_ERR") {
		t.Errorf("RefusedWhile of an unknown command: %q, want it to show the refusal", got)
	}
}

// ClosedAddr is refused at once.
func TestClosedAddrIsRefused(t *testing.T) {
	c, err := net.DialTimeout("tcp", ClosedAddr(t), 2*time.Second)
	if err == nil {
		_ = c.Close()
		t.Fatal("a dial of ClosedAddr succeeded")
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("a dial of ClosedAddr: %v, want connection refused", err)
	}
}

// namedServer listens on loopback, writes name to each connection it
// accepts and then echoes what it reads. Its connections stay open until
// the test ends.
func namedServer(t *testing.T, name string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			go func() { _, _ = io.WriteString(c, name); _, _ = io.Copy(c, c) }()
		}
	}()
	return ln.Addr().String()
}

// pipe passes everything on both ways.
func pipe(client, server net.Conn) {
	go func() { _, _ = io.Copy(server, client) }()
	_, _ = io.Copy(client, server)
}

// dialRead dials addr and reads n bytes, failing t if they do not come
// within 5 s; it returns them and the connection.
func dialRead(t *testing.T, addr string, n int) (string, net.Conn) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, n)
	if _, err := io.ReadFull(c, buf); err != nil {
		t.Fatalf("read %d bytes through %s: %v (got %q)", n, addr, err, buf)
	}
	return string(buf), c
}

// readEnds fails t unless c's peer closes it within 5 s.
func readEnds(t *testing.T, c net.Conn, what string) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var buf [1]byte
	if _, err := c.Read(buf[:]); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("%s: read %v; want the connection closed", what, err)
	}
}

// Proxy hands serve the client's connection first, then the server's,
// and what serve writes is all that passes.
func TestProxyHandsServeTheClientThenTheServer(t *testing.T) {
	addr := Proxy(t, namedServer(t, "A"), func(client, server net.Conn) {
		_, _ = io.WriteString(client, "serve|")
		var b [1]byte
		if _, err := io.ReadFull(server, b[:]); err == nil {
			_, _ = client.Write(b[:])
		}
	})
	if got, _ := dialRead(t, addr, len("serve|A")); got != "serve|A" {
		t.Fatalf("read %q through the proxy, want %q", got, "serve|A")
	}
}

// ProxyTo dials, for each connection, the address its function names
// then.
func TestProxyToDialsTheAddressOfTheMoment(t *testing.T) {
	a, b := namedServer(t, "A"), namedServer(t, "B")
	var target atomic.Value
	target.Store(a)
	addr := ProxyTo(t, func() string { return target.Load().(string) }, pipe)
	if got, _ := dialRead(t, addr, 1); got != "A" {
		t.Fatalf("first connection reached %q, want A", got)
	}
	target.Store(b)
	if got, _ := dialRead(t, addr, 1); got != "B" {
		t.Fatalf("connection after the switch reached %q, want B", got)
	}
}

// When the test ends, the proxy stops listening and closes every
// connection it holds, though the server's end stays open.
func TestProxyClosesEverythingWhenItsTestEnds(t *testing.T) {
	target := namedServer(t, "A") // outlives the proxy
	var addr string
	var c net.Conn
	t.Run("proxy", func(st *testing.T) {
		addr = Proxy(st, target, pipe)
		var err error
		if c, err = net.DialTimeout("tcp", addr, 5*time.Second); err != nil {
			st.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() }) // the client's end outlives the proxy
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		var b [1]byte
		if _, err := io.ReadFull(c, b[:]); err != nil || b[0] != 'A' {
			st.Fatalf("read %q, %v through the proxy, want A", b[:], err)
		}
	})
	if c == nil {
		return
	}
	readEnds(t, c, "a connection after the proxy's test ended")
	if c, err := net.DialTimeout("tcp", addr, 2*time.Second); err == nil {
		_ = c.Close()
		t.Fatal("the proxy still listens after its test ended")
	}
}

// A connection the proxy cannot pass on (its server refuses it) is
// closed at once, as the server's refusal would be.
func TestProxyClosesAClientItCannotConnect(t *testing.T) {
	addr := Proxy(t, ClosedAddr(t), pipe)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	readEnds(t, c, "a connection to a proxy of a closed address")
}

// PipelineHook calls itself with each pipeline before it reaches Redis,
// on the goroutine sending it, and never with single commands. (It also
// sees each new connection's handshake, which go-redis pipelines: CLIENT
// SETINFO.)
func TestPipelineHookSeesEachPipelineBeforeRedis(t *testing.T) {
	require(t, "redis-server")
	s := Start(t, Options{})
	ctx := context.Background()
	admin, c := s.Client(), s.Client()
	self := stacks.Self()
	var calls, singles atomic.Int32
	c.AddHook(PipelineHook(func(cmds []redis.Cmder) {
		for _, cmd := range cmds {
			if cmd.Name() == "set" && cmd.Args()[1] == "single" {
				singles.Add(1)
			}
		}
		if cmds[0].Name() != "set" || cmds[0].Args()[1] != "k" {
			return // a handshake
		}
		calls.Add(1)
		if g := stacks.Self(); g != self {
			t.Errorf("hook ran on goroutine %s, not on %s, the one sending the pipeline", g, self)
		}
		if len(cmds) != 2 {
			t.Errorf("hook called with %d commands, want the pipeline's 2", len(cmds))
		}
		if v, err := admin.Get(ctx, "k").Result(); err != redis.Nil {
			t.Errorf("in the hook, Redis already has k (%q, %v): the pipeline reached it first", v, err)
		}
	}))
	if err := c.Set(ctx, "single", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if n := singles.Load(); n != 0 {
		t.Fatalf("a single command called the hook %d times", n)
	}
	if _, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, "k", "v", 0)
		p.Get(ctx, "k")
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("one pipeline called the hook %d times, want 1", n)
	}
}

// MessageBeforePong returns a message published before it, nil once none
// is left, and an error, not nil, when no answer comes. A call that
// returned a message left its PING's answer unread: the next call took
// that stale answer for its own and said nothing was published, though
// a message had come after it.
func TestMessageBeforePongSeesWhatCameBefore(t *testing.T) {
	require(t, "redis-server")
	s := Start(t, Options{})
	ctx := context.Background()
	sub := s.Client().Subscribe(ctx, "ch")
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil { // the subscription's confirmation
		t.Fatal(err)
	}
	if err := s.Client().Publish(ctx, "ch", "x").Err(); err != nil {
		t.Fatal(err)
	}
	msg, err := MessageBeforePong(ctx, sub)
	if err != nil || msg == nil || msg.Payload != "x" {
		t.Fatalf("MessageBeforePong after a publish: %v, %v; want the message x", msg, err)
	}
	if err := s.Client().Publish(ctx, "ch", "y").Err(); err != nil {
		t.Fatal(err)
	}
	msg, err = MessageBeforePong(ctx, sub)
	if err != nil || msg == nil || msg.Payload != "y" {
		t.Fatalf("MessageBeforePong after a second publish: %v, %v; want the message y", msg, err)
	}
	if msg, err := MessageBeforePong(ctx, sub); err != nil || msg != nil {
		t.Fatalf("MessageBeforePong with nothing published: %v, %v; want nil, nil", msg, err)
	}
	s.Pause()
	defer s.Resume()
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if msg, err := MessageBeforePong(short, sub); err == nil {
		t.Fatalf("MessageBeforePong with a paused server: %v, nil error; want an error, not quiet", msg)
	}
}

// errorsTB records Errorf instead of failing the test.
type errorsTB struct {
	testing.TB
	errors []string
}

func (e *errorsTB) Helper() {}

func (e *errorsTB) Errorf(format string, args ...any) {
	e.errors = append(e.errors, fmt.Sprintf(format, args...))
}

// The README's ACL user has the rules README gives it and no more, even
// where a user of that name had more, and NoneDenied sees its denials.
func TestREADMEACLUserHasREADMEsRightsOnly(t *testing.T) {
	require(t, "redis-server")
	s := Start(t, Options{})
	ctx := context.Background()
	admin := s.Client()
	do := func(args ...any) error { return admin.Do(ctx, args...).Err() }
	if err := do("ACL", "SETUSER", "combo", "on", ">old", "~*", "&*", "+@all"); err != nil {
		t.Fatal(err)
	}
	readme := filepath.Join("..", "..", "README.md")
	rules := READMEACLRules(t, readme)
	if len(rules) < 3 || rules[0] != "~combo:*" || rules[1] != "&act:*" || rules[2] != "-@all" {
		t.Fatalf("README's ACL rules begin %q, want ~combo:* &act:* -@all", rules)
	}
	SetREADMEACLUser(t, do, readme, "pw")
	for _, tc := range []struct {
		cmd     []any
		allowed bool
	}{
		{[]any{"GET", "combo:k"}, true},
		{[]any{"PUBLISH", "act:1", "m"}, true},
		{[]any{"GET", "other:k"}, false},
		{[]any{"PUBLISH", "other", "m"}, false},
		{[]any{"FLUSHALL"}, false},
		{[]any{"CONFIG", "GET", "save"}, false},
	} {
		got, err := admin.Do(ctx, append([]any{"ACL", "DRYRUN", "combo"}, tc.cmd...)...).Text()
		if err != nil {
			t.Fatal(err)
		}
		if (got == "OK") != tc.allowed {
			t.Errorf("ACL DRYRUN combo %v: %q, want allowed=%v", tc.cmd, got, tc.allowed)
		}
	}
	rec := &errorsTB{TB: t}
	NoneDenied(rec, admin)
	if len(rec.errors) != 0 {
		t.Fatalf("NoneDenied before any denial: %q", rec.errors)
	}
	old := redis.NewClient(&redis.Options{Addr: s.Addr, Username: "combo", Password: "old", MaxRetries: -1})
	defer old.Close()
	if err := old.Ping(ctx).Err(); err == nil {
		t.Error("the user's earlier password still works")
	}
	user := redis.NewClient(&redis.Options{Addr: s.Addr, Username: "combo", Password: "pw"})
	defer user.Close()
	if err := user.FlushAll(ctx).Err(); err == nil {
		t.Fatal("README's user ran FLUSHALL")
	}
	NoneDenied(rec, admin)
	if len(rec.errors) != 1 {
		t.Fatalf("NoneDenied after a denial reported %q, want one error", rec.errors)
	}
}

// StartReplica returns a replica of the test's Args, linked to its
// master and holding its data.
func TestStartReplicaIsLinkedAndHasItsArgs(t *testing.T) {
	require(t, "redis-server")
	ctx := context.Background()
	master := Start(t, Options{})
	if err := master.Client().Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	r := StartReplica(t, master, "--maxmemory-policy", "allkeys-lru")
	c := r.Client()
	info, err := c.Info(ctx, "replication").Result()
	if err != nil || !strings.Contains(info, "master_link_status:up") {
		t.Fatalf("replica's INFO replication when StartReplica returned: %v\n%s", err, info)
	}
	if v, err := c.Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Fatalf("GET k on the replica: %q, %v; want the master's v", v, err)
	}
	if got := configOf(t, c, "maxmemory-policy"); got != "allkeys-lru" {
		t.Fatalf("replica's maxmemory-policy %q, want the test's allkeys-lru", got)
	}
}

// waitSentinelSeesMasterUp waits until Sentinel s flags the master name
// up and connected: plain "master", not s_down or disconnected.
func waitSentinelSeesMasterUp(t *testing.T, s *Server, name string) {
	t.Helper()
	sc := redis.NewSentinelClient(s.options())
	defer sc.Close()
	var flags string
	testwait.For(t, "the Sentinel to see its master up", func() bool {
		m, err := sc.Master(context.Background(), name).Result()
		flags = m["flags"]
		return err == nil && flags == "master"
	})
}

// A Sentinel of a TLS master talks TLS to it: one that could not (no
// tls-replication) flagged it down and disconnected, and would fail it
// over for nothing, while a test that only asked it for the master's
// address passed.
func TestSentinelOfATLSMasterReachesIt(t *testing.T) {
	require(t, "redis-server")
	master := Start(t, Options{TLS: true})
	s := StartSentinel(t, "m", master)
	waitSentinelSeesMasterUp(t, s, "m")
}

// README's Sentinel user may ask for the master and no more.
func TestREADMESentinelACLUserHasREADMEsRightsOnly(t *testing.T) {
	require(t, "redis-server")
	ctx := context.Background()
	master := Start(t, Options{})
	s := StartSentinel(t, "m", master)
	admin := s.Client()
	SetREADMESentinelACLUser(t, func(args ...any) error { return admin.Do(ctx, args...).Err() }, filepath.Join("..", "..", "README.md"), "pw")
	user := redis.NewSentinelClient(&redis.Options{Addr: s.Addr, Username: "combo-sentinel", Password: "pw", MaxRetries: -1})
	defer user.Close()
	if addr, err := user.GetMasterAddrByName(ctx, "m").Result(); err != nil || len(addr) != 2 || addr[1] != fmt.Sprint(master.Port) {
		t.Fatalf("README's Sentinel user: SENTINEL get-master-addr-by-name m: %v, %v", addr, err)
	}
	if err := user.Masters(ctx).Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Fatalf("README's Sentinel user: SENTINEL MASTERS: %v, want NOPERM", err)
	}
}

// A Sentinel fails its master over as quickly as StartSentinels says.
func TestStartSentinelWatchesWithItsTimeouts(t *testing.T) {
	require(t, "redis-server")
	master := Start(t, Options{})
	s := StartSentinel(t, "m", master)
	waitSentinelSeesMasterUp(t, s, "m")
	for field, want := range map[string]string{
		"quorum": "1", "down-after-milliseconds": "500", "failover-timeout": "2000",
		"ip": "127.0.0.1", "port": fmt.Sprint(master.Port),
	} {
		if got := sentinelField(t, s, "m", field); got != want {
			t.Errorf("Sentinel's %s for m: %q, want %q", field, got, want)
		}
	}
}
