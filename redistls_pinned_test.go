package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/combo-service/combo-service/conf"
	"github.com/combo-service/combo-service/internal/testredis"
)

// The gauge openRedis exports (what ComboRedisTLSFilesUnreadable
// reads) follows the files at each scrape: 0 while one is broken, 1 again
// once fixed. The existing tests check d.filesRead() directly, and the
// export only while the files are whole.
func TestTLSFilesReadGaugeFollowsTheFiles(t *testing.T) {
	pki := testredis.NewTLSFiles(t, t.TempDir())
	scrape := openTLSGauges(t, conf.Redis{TLSCAFile: pki.CA, TLSCertFile: pki.ClientCert, TLSKeyFile: pki.ClientKey})
	gauge := func(name string) float64 {
		t.Helper()
		v, ok := scrape()[name]
		if !ok {
			t.Fatalf("%s not exported", name)
		}
		return v
	}
	whole, err := os.ReadFile(pki.ClientCert)
	if err != nil {
		t.Fatal(err)
	}
	if got := gauge("combo_redis_tls_files_read"); got != 1 {
		t.Fatalf("combo_redis_tls_files_read %v with the files whole, want 1", got)
	}
	if err := os.WriteFile(pki.ClientCert, []byte("-----BEGIN CERTIFICATE-----\nMIIB"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := gauge("combo_redis_tls_files_read"); got != 0 {
		t.Fatalf("exported combo_redis_tls_files_read %v with the certificate half written, want 0 (the alert's only input)", got)
	}
	if err := os.WriteFile(pki.ClientCert, whole, 0o600); err != nil {
		t.Fatal(err)
	}
	if got := gauge("combo_redis_tls_files_read"); got != 1 {
		t.Fatalf("exported combo_redis_tls_files_read %v with the files whole again, want 1", got)
	}
}

// A healthy pooled TLS connection is used again, not dialed anew
// at each command: go-redis checks every connection it takes from the pool
// through checkableTLSConn, and only one Redis closed may fail that check.
func TestTLSPooledConnectionIsReused(t *testing.T) {
	r := testredis.Start(t, testredis.Options{TLS: true})
	cfg := conf.Redis{TLS: true, TLSCAFile: r.TLS.CA, TLSCertFile: r.TLS.ClientCert, TLSKeyFile: r.TLS.ClientKey}
	d, err := newRedisTLSDialer(cfg.TLSConfigFrom, cfg.TLSFiles(), 10*time.Second, zap.NewNop(), nil) // a slow CI host's handshake
	if err != nil {
		t.Fatal(err)
	}
	var dials atomic.Int32
	c := redis.NewClient(&redis.Options{Addr: r.Addr, PoolSize: 1, MaxRetries: -1,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			dials.Add(1)
			return d.Dial(ctx, network, addr)
		}})
	defer c.Close()
	for i := range 20 {
		if err := c.Ping(context.Background()).Err(); err != nil {
			t.Fatalf("PING %d: %v", i, err)
		}
	}
	if n := dials.Load(); n != 1 {
		t.Fatalf("%d TLS dials for 20 PINGs on a pool of 1, want 1: healthy connections are thrown away", n)
	}
}

// While a file cannot be read at all, the warning says why (the
// alert's text promises "naming the file and why: ... a missing file"), not
// only that the bytes it got hold no certificate.
func TestTLSWarningSaysWhyAFileIsUnreadable(t *testing.T) {
	pki := testredis.NewTLSFiles(t, t.TempDir())
	cfg := conf.Redis{TLS: true, TLSCAFile: pki.CA, TLSCertFile: pki.ClientCert, TLSKeyFile: pki.ClientKey}
	core, logs := observer.New(zap.WarnLevel)
	d, err := newRedisTLSDialer(cfg.TLSConfigFrom, cfg.TLSFiles(), time.Second, zap.New(core), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(pki.ClientCert); err != nil {
		t.Fatal(err)
	}
	if got := d.filesRead(); got != 0 {
		t.Fatalf("combo_redis_tls_files_read %v with the certificate missing, want 0", got)
	}
	warned := logs.FilterMessageSnippet("could not read the redis.tls_* files again").All()
	if len(warned) != 1 {
		t.Fatalf("warnings %v, want one", logs.All())
	}
	msg := fmt.Sprint(warned[0].ContextMap()["error"])
	if !strings.Contains(msg, "redis.tls_cert_file") || !strings.Contains(msg, "no such file or directory") {
		t.Fatalf("warning says %q, want it to name redis.tls_cert_file and say the file is missing", msg)
	}
}

// A file that stays broken is seen at every dial and scrape; its
// warning is thinned to about one a second (the rest counted as suppressed
// under logger "main"), not written at each.
func TestTLSBrokenFileWarningIsThinned(t *testing.T) {
	pki := testredis.NewTLSFiles(t, t.TempDir())
	cfg := conf.Redis{TLS: true, TLSCAFile: pki.CA, TLSCertFile: pki.ClientCert, TLSKeyFile: pki.ClientKey}
	core, logs := observer.New(zap.WarnLevel)
	var suppressed atomic.Int64
	d, err := newRedisTLSDialer(cfg.TLSConfigFrom, cfg.TLSFiles(), time.Second, zap.New(core),
		func(_ string, n int) { suppressed.Add(int64(n)) })
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pki.ClientCert, []byte("-----BEGIN CERTIFICATE-----\nMIIB"), 0o600); err != nil {
		t.Fatal(err)
	}
	for range 50 {
		d.filesRead()
		_ = d.config()
	}
	if n := logs.FilterMessageSnippet("could not read the redis.tls_* files again").Len(); n > 2 {
		t.Fatalf("%d warnings for 100 reads of a broken file within a moment, want about one a second", n)
	}
	if suppressed.Load() == 0 {
		t.Fatal("no warning counted as suppressed")
	}
}
