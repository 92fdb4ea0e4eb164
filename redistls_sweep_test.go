package main

import (
	"context"
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/combo-service/combo-service/conf"
	"github.com/combo-service/combo-service/internal/testredis"
	"github.com/combo-service/combo-service/internal/testwait"
	"github.com/combo-service/combo-service/metrics"
)

// The note of a change gives the expiry of the client certificate just
// read (README: the log notes when they change, with the client
// certificate's expiry), not of the one it replaces: an operator reads
// there that the renewal took. TestRedisTLSDialerNotesEachChangeOfTheFiles
// rotates to a certificate that expires the same second as the old one.
func TestRedisTLSDialerNoteGivesTheNewExpiry(t *testing.T) {
	old := testredis.NewTLSFiles(t, t.TempDir())
	cfg := conf.Redis{TLS: true, TLSCAFile: old.CA, TLSCertFile: old.ClientCert, TLSKeyFile: old.ClientKey}
	core, logs := observer.New(zap.InfoLevel)
	d, err := newRedisTLSDialer(cfg.TLSConfigFrom, cfg.TLSFiles(), time.Second, zap.New(core), nil)
	if err != nil {
		t.Fatal(err)
	}
	renewed := testredis.NewTLSFilesUntil(t, t.TempDir(), time.Now().Add(48*time.Hour))
	want := leafExpiry(t, renewed.ClientCert)
	if want == leafExpiry(t, old.ClientCert) {
		t.Fatal("the renewed certificate expires when the old one does: the test tells nothing")
	}
	copyFile(t, old.CA, renewed.CA)
	copyFile(t, old.ClientCert, renewed.ClientCert)
	copyFile(t, old.ClientKey, renewed.ClientKey)
	d.config()
	changed := logs.FilterMessageSnippet("the redis.tls_* files changed").All()
	if len(changed) != 1 {
		t.Fatalf("logs %v, want the change noted once", logs.All())
	}
	if got, _ := changed[0].ContextMap()["client_certificate_expires"].(time.Time); got.Unix() != want {
		t.Fatalf("the note says the client certificate expires %v, want the renewed one's %v", got, time.Unix(want, 0))
	}
}

// silentListener accepts TCP connections and never answers them (a Redis
// host that is paused or overloaded: the kernel completes the connect, the
// handshake gets no reply). Each accepted connection is sent on the
// channel returned.
func silentListener(t *testing.T) (string, <-chan net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan net.Conn, 16)
	t.Cleanup(func() {
		ln.Close()
		for {
			select {
			case c := <-accepted:
				c.Close()
			default:
				return
			}
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	return ln.Addr().String(), accepted
}

// dialAsync runs d.Dial(ctx) and sends its error on the channel returned.
func dialAsync(d *redisTLSDialer, ctx context.Context, addr string) <-chan error {
	done := make(chan error, 1)
	go func() {
		c, err := d.Dial(ctx, "tcp", addr)
		if c != nil {
			c.Close()
		}
		done <- err
	}()
	return done
}

// redis.timeout bounds the connect and the handshake together (Dial's
// promise, as go-redis's own TLS dial): a Redis that accepts the
// connection and never answers the handshake fails the dial with a timeout
// even when the caller's context has no deadline.
func TestRedisTLSDialerTimeoutBoundsTheHandshake(t *testing.T) {
	pki := testredis.NewTLSFiles(t, t.TempDir())
	cfg := conf.Redis{TLS: true, TLSCAFile: pki.CA}
	d, err := newRedisTLSDialer(cfg.TLSConfigFrom, cfg.TLSFiles(), 100*time.Millisecond, zap.NewNop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := silentListener(t)
	err = testwait.Receive(t, "the dial to a Redis that never answers the handshake to fail", dialAsync(d, context.Background(), addr))
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("dial: %v, want the handshake's timeout", err)
	}
}

// A dial whose caller gives up (its context canceled) ends then, not at
// redis.timeout.
func TestRedisTLSDialerGivesUpWithItsContext(t *testing.T) {
	pki := testredis.NewTLSFiles(t, t.TempDir())
	cfg := conf.Redis{TLS: true, TLSCAFile: pki.CA}
	d, err := newRedisTLSDialer(cfg.TLSConfigFrom, cfg.TLSFiles(), time.Hour, zap.NewNop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	addr, accepted := silentListener(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := dialAsync(d, ctx, addr)
	conn := testwait.Receive(t, "the dial to connect", accepted)
	defer conn.Close()
	cancel()
	if err := testwait.Receive(t, "the dial to end with its context", done); !errors.Is(err, context.Canceled) {
		t.Fatalf("dial: %v, want context.Canceled", err)
	}
}

// The TLS dialer's warnings thinned as repeats are counted in
// combo_log_lines_suppressed_total{logger="main"}, as README's table says:
// openRedis hands the dialer the metrics' counter.
func TestTLSDialerWarningsLeftOutAreCountedUnderMain(t *testing.T) {
	pki := testredis.NewTLSFiles(t, t.TempDir())
	c := conf.Default()
	c.Redis.Addr = "127.0.0.1:1" // not dialed
	c.Redis.TLS, c.Redis.TLSCAFile, c.Redis.TLSCertFile, c.Redis.TLSKeyFile = true, pki.CA, pki.ClientCert, pki.ClientKey
	reg := prometheus.NewRegistry()
	m := metrics.New(prometheus.NewRegistry())
	core, _ := observer.New(zap.InfoLevel) // a logger that writes: zap.NewNop leaves nothing to thin
	_, _, closeAll, err := openRedis(c, zap.New(core), reg, m)
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll()
	if err := os.WriteFile(pki.ClientCert, []byte("-----BEGIN CERTIFICATE-----\nMIIB"), 0o600); err != nil {
		t.Fatal(err)
	}
	for range 5 { // scrapes within a moment: one warning, the rest left out
		if _, err := reg.Gather(); err != nil {
			t.Fatal(err)
		}
	}
	if n := testutil.ToFloat64(m.LogLinesSuppressed.WithLabelValues("main")); n < 1 {
		t.Fatalf("combo_log_lines_suppressed_total{logger=\"main\"} %v after 5 scrapes of a broken file, want the repeats counted", n)
	}
}
