package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/combo-service/combo-service/conf"
	"github.com/combo-service/combo-service/internal/stacks"
	"github.com/combo-service/combo-service/internal/testredis"
	"github.com/combo-service/combo-service/internal/testwait"
	"github.com/combo-service/combo-service/metrics"
)

// copyFile rewrites dst with src's bytes, as a rotation rewrites a file in
// place.
func copyFile(t *testing.T, dst, src string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// countingDialer is a dialer of cfg's files that counts how often it
// parses them.
func countingDialer(t *testing.T, cfg conf.Redis) (*redisTLSDialer, *atomic.Int32) {
	t.Helper()
	loads := new(atomic.Int32)
	load := func(read func(string) ([]byte, error)) (*tls.Config, error) {
		loads.Add(1)
		return cfg.TLSConfigFrom(read)
	}
	d, err := newRedisTLSDialer(load, cfg.TLSFiles(), time.Second, zap.NewNop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return d, loads
}

// A rotation that rewrites the files one at a time, with dials between,
// is two changes (the CA, then the client certificate), each noted: the
// note of the certificate, with its expiry, is the one that says the
// rotation is done, and it must not be thinned as a repeat of the first.
func TestRedisTLSDialerNotesEachChangeOfTheFiles(t *testing.T) {
	old := testredis.NewTLSFiles(t, t.TempDir())
	cfg := conf.Redis{TLS: true, TLSCAFile: old.CA, TLSCertFile: old.ClientCert, TLSKeyFile: old.ClientKey}
	core, logs := observer.New(zap.InfoLevel)
	d, err := newRedisTLSDialer(cfg.TLSConfigFrom, cfg.TLSFiles(), time.Second, zap.New(core), nil)
	if err != nil {
		t.Fatal(err)
	}
	d.config()
	if n := logs.Len(); n != 0 {
		t.Fatalf("logs %v with the files unchanged, want none", logs.All())
	}
	rotated := testredis.NewTLSFiles(t, t.TempDir())
	copyFile(t, old.CA, rotated.CA)
	d.config()
	copyFile(t, old.ClientCert, rotated.ClientCert)
	copyFile(t, old.ClientKey, rotated.ClientKey)
	d.config()
	d.config()
	changed := logs.FilterMessageSnippet("the redis.tls_* files changed").All()
	if len(changed) != 2 {
		t.Fatalf("logs %v, want the two changes of the files noted, once each", logs.All())
	}
	cert, err := tls.LoadX509KeyPair(rotated.ClientCert, rotated.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := changed[1].ContextMap()["client_certificate_expires"].(time.Time); !got.Equal(cert.Leaf.NotAfter) {
		t.Fatalf("the last note says the client certificate expires %v, want the new one's %v", got, cert.Leaf.NotAfter)
	}
}

// Two dials read the files at once, the first before a rotation and the
// second after it, and the first to read is the last to compare: the
// change is noted once, not once per dial, and the files kept (those a
// later half-written rotation falls back to) are the new ones, not the
// old ones again.
func TestRedisTLSDialerKeepsTheNewerOfTwoReadsAtOnce(t *testing.T) {
	loadFiles := func(f testredis.TLSFiles) *tls.Config {
		cfg, err := conf.Redis{TLS: true, TLSCAFile: f.CA, TLSCertFile: f.ClientCert, TLSKeyFile: f.ClientKey}.TLSConfig()
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	old, rotated := loadFiles(testredis.NewTLSFiles(t, t.TempDir())), loadFiles(testredis.NewTLSFiles(t, t.TempDir()))
	var reads atomic.Int32
	inFirst, release := make(chan struct{}), make(chan struct{})
	load := func(func(string) ([]byte, error)) (*tls.Config, error) {
		switch reads.Add(1) {
		case 1: // newRedisTLSDialer's
			return old, nil
		case 2: // a dial reads before the rotation, and is slow to go on
			close(inFirst)
			<-release
			return old, nil
		default: // after it
			return rotated, nil
		}
	}
	core, logs := observer.New(zap.InfoLevel)
	d, err := newRedisTLSDialer(load, nil, time.Second, zap.New(core), nil)
	if err != nil {
		t.Fatal(err)
	}
	first, second, secondID := make(chan struct{}), make(chan struct{}), make(chan string, 1)
	go func() { d.config(); close(first) }()
	testwait.Receive(t, "the first dial to read the files again", inFirst)
	go func() { secondID <- stacks.Self(); d.config(); close(second) }()
	// Waited for, not slept for: had the first gone on before the second
	// dial began, they would not be at once, and the test would pass on
	// dials that compare in the other order.
	id := <-secondID
	deadline := time.Now().Add(10 * time.Second)
	for reads.Load() < 3 { // the second dial read the rotated files, or...
		state, stack, ok := stacks.State(id)
		if ok && state != "running" && state != "runnable" && strings.Contains(stack, "(*redisTLSDialer)") {
			break // ... it waits for the first
		}
		if time.Now().After(deadline) {
			t.Fatal("the second dial neither read the files nor waited for the first within 10 s")
		}
		time.Sleep(time.Millisecond)
	}
	close(release)
	testwait.Receive(t, "the first dial to end", first)
	testwait.Receive(t, "the second dial to end", second)
	d.config()
	if n := logs.FilterMessageSnippet("the redis.tls_* files changed").Len(); n != 1 {
		t.Fatalf("logs %v, want the one change noted once", logs.All())
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.last != rotated {
		t.Fatal("the dialer keeps the files read before the rotation as those last read whole")
	}
}

// A rotation half written (the certificate file being replaced, or a new
// certificate beside the old key) does not stop the service from dialing:
// it keeps the files it last read whole, and warns, naming the file.
func TestRedisTLSDialerKeepsTheFilesLastReadWhole(t *testing.T) {
	r := testredis.Start(t, testredis.Options{TLS: true})
	cfg := conf.Redis{TLS: true, TLSCAFile: r.TLS.CA, TLSCertFile: r.TLS.ClientCert, TLSKeyFile: r.TLS.ClientKey}
	core, logs := observer.New(zap.WarnLevel)
	d, err := newRedisTLSDialer(cfg.TLSConfigFrom, cfg.TLSFiles(), time.Second, zap.New(core), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(r.TLS.ClientCert, []byte("-----BEGIN CERTIFICATE-----\nMIIB"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: r.Addr, Dialer: d.Dial})
	defer c.Close()
	if err := c.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("PING with the certificate file half written: %v, want the files read before", err)
	}
	warned := logs.FilterMessageSnippet("could not read the redis.tls_* files again")
	if warned.Len() != 1 || !strings.Contains(fmt.Sprint(warned.All()[0].ContextMap()["error"]), "redis.tls_cert_file") {
		t.Fatalf("warnings %v, want one naming redis.tls_cert_file", logs.All())
	}
	if got := d.filesRead(); got != 0 {
		t.Fatalf("combo_redis_tls_files_read %v with the certificate file half written, want 0", got)
	}
	copyFile(t, r.TLS.ClientCert, r.TLS.ServerCert) // whole again (not the key's: still refused)
	if got := d.filesRead(); got != 0 {
		t.Fatalf("combo_redis_tls_files_read %v with a certificate the key does not match, want 0", got)
	}
	renewed := testredis.NewTLSFiles(t, t.TempDir())
	copyFile(t, r.TLS.ClientCert, renewed.ClientCert)
	copyFile(t, r.TLS.ClientKey, renewed.ClientKey)
	if got := d.filesRead(); got != 1 {
		t.Fatalf("combo_redis_tls_files_read %v with a new certificate and its key, want 1", got)
	}
}

// combo_redis_tls_files_read in each state of each file, with a client
// certificate and with a CA only: 1 while the files are those last read
// whole (not parsed again), 0 while one is broken or missing, and 1 again
// once it is fixed, even with the very bytes last read whole. And openRedis
// exports it with any redis.tls, the expiry only with a client certificate.
func TestRedisTLSDialerFilesReadInEachState(t *testing.T) {
	pki := testredis.NewTLSFiles(t, t.TempDir())
	for _, cfg := range []conf.Redis{
		{TLS: true, TLSCAFile: pki.CA},
		{TLS: true, TLSCAFile: pki.CA, TLSCertFile: pki.ClientCert, TLSKeyFile: pki.ClientKey},
	} {
		d, loads := countingDialer(t, cfg)
		for _, f := range cfg.TLSFiles() {
			whole, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			check := func(state string, want float64, parsed bool) {
				t.Helper()
				before := loads.Load()
				if got := d.filesRead(); got != want {
					t.Fatalf("combo_redis_tls_files_read %v with %s %s (%d files), want %v", got, f, state, len(cfg.TLSFiles()), want)
				}
				if again := loads.Load() != before; again != parsed {
					t.Fatalf("files parsed again: %v with %s %s, want %v", again, f, state, parsed)
				}
			}
			check("unchanged", 1, false)
			if err := os.WriteFile(f, []byte("-----BEGIN"), 0o600); err != nil {
				t.Fatal(err)
			}
			check("half written", 0, true)
			if err := os.WriteFile(f, whole, 0o600); err != nil {
				t.Fatal(err)
			}
			check("written back as last read whole", 1, false)
			if err := os.Remove(f); err != nil {
				t.Fatal(err)
			}
			check("missing", 0, true)
			if err := os.WriteFile(f, whole, 0o600); err != nil {
				t.Fatal(err)
			}
			check("back", 1, false)
		}

		exported := openTLSGauges(t, cfg)()
		if got, ok := exported["combo_redis_tls_files_read"]; !ok || got != 1 {
			t.Fatalf("openRedis with %d redis.tls_* files exports %v, want combo_redis_tls_files_read 1", len(cfg.TLSFiles()), exported)
		}
		_, expiry := exported["combo_redis_tls_client_certificate_expiry_timestamp_seconds"]
		if expiry != (cfg.TLSCertFile != "") {
			t.Fatalf("openRedis with %d redis.tls_* files exports %v: the expiry only with a client certificate", len(cfg.TLSFiles()), exported)
		}
	}
}

// The exported expiry reads the files at each call (each scrape), however
// long the pool goes without a dial: a certificate renewed in place shows
// at once, and while a renewal does not read whole, the one new
// connections still present (the last read whole) shows.
func TestRedisTLSDialerExpiryReadsTheFilesAtEachScrape(t *testing.T) {
	old := testredis.NewTLSFiles(t, t.TempDir())
	cfg := conf.Redis{TLS: true, TLSCAFile: old.CA, TLSCertFile: old.ClientCert, TLSKeyFile: old.ClientKey}
	d, err := newRedisTLSDialer(cfg.TLSConfigFrom, cfg.TLSFiles(), time.Second, zap.NewNop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := int64(d.clientCertificateExpiry()), leafExpiry(t, old.ClientCert); got != want {
		t.Fatalf("client certificate expiry %d, want %d", got, want)
	}
	renewed := testredis.NewTLSFilesUntil(t, t.TempDir(), time.Now().Add(48*time.Hour))
	copyFile(t, old.CA, renewed.CA)
	copyFile(t, old.ClientCert, renewed.ClientCert)
	copyFile(t, old.ClientKey, renewed.ClientKey)
	want := leafExpiry(t, renewed.ClientCert)
	if got := int64(d.clientCertificateExpiry()); got != want {
		t.Fatalf("client certificate expiry %d after a renewal with no dial, want the new one's %d", got, want)
	}
	if err := os.WriteFile(old.ClientCert, []byte("-----BEGIN CERTIFICATE-----\nMIIB"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := int64(d.clientCertificateExpiry()); got != want {
		t.Fatalf("client certificate expiry %d with the file half written, want the last read whole's %d", got, want)
	}
}

// Files whose bytes have not changed are not parsed again (a system CA
// bundle takes milliseconds, under the dialer's lock, at every dial and
// scrape); a file rewritten is, even with the same size at the same
// instant, which a check of sizes and times could miss.
func TestRedisTLSDialerParsesOnlyChangedFiles(t *testing.T) {
	pki := testredis.NewTLSFiles(t, t.TempDir())
	cfg := conf.Redis{TLS: true, TLSCAFile: pki.CA, TLSCertFile: pki.ClientCert, TLSKeyFile: pki.ClientKey}
	d, loads := countingDialer(t, cfg)
	first := d.config()
	d.config()
	if n := loads.Load(); n != 1 {
		t.Fatalf("%d loads with the files unchanged, want only the first", n)
	}
	rotated := testredis.NewTLSFiles(t, t.TempDir())
	copyFile(t, pki.ClientCert, rotated.ClientCert)
	copyFile(t, pki.ClientKey, rotated.ClientKey)
	if got := d.config(); loads.Load() != 2 || sameTLSFiles(got, first) {
		t.Fatalf("%d loads after the client certificate changed, want 2 and the new certificate", loads.Load())
	}
}

// The files are parsed from the bytes the dialer compared, not read from
// disk again: a rotation that wrote other files between the two and then
// wrote back the very bytes compared left those other files in use, taken
// for the ones on disk, until the files next changed.
func TestRedisTLSDialerParsesTheBytesItCompared(t *testing.T) {
	first, rotated, between := testredis.NewTLSFiles(t, t.TempDir()), testredis.NewTLSFiles(t, t.TempDir()), testredis.NewTLSFiles(t, t.TempDir())
	cfg := conf.Redis{TLS: true, TLSCAFile: first.CA}
	var loads atomic.Int32
	load := func(read func(string) ([]byte, error)) (*tls.Config, error) {
		if loads.Add(1) == 2 { // the rotation: other files while they are parsed, then its own back
			copyFile(t, first.CA, between.CA)
			defer copyFile(t, first.CA, rotated.CA)
		}
		return cfg.TLSConfigFrom(read)
	}
	d, err := newRedisTLSDialer(load, cfg.TLSFiles(), time.Second, zap.NewNop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	copyFile(t, first.CA, rotated.CA)
	d.config()
	want, err := conf.Redis{TLS: true, TLSCAFile: rotated.CA}.TLSConfig()
	if err != nil {
		t.Fatal(err)
	}
	if got := d.config(); loads.Load() != 2 || !got.RootCAs.Equal(want.RootCAs) {
		t.Fatalf("after %d loads the dialer trusts another CA than the file holds", loads.Load())
	}
}

// A CA bundle caught half rewritten (the new CA whole, the old one cut
// short) is not read whole: the dialer keeps the bundle it last read whole,
// and new connections go on. Go's PEM readers stop quietly at the cut
// block, so it was taken whole: files_read said 1, the log said the files
// changed, and new connections were refused (the server's CA was the cut
// one).
func TestRedisTLSDialerRefusesAHalfWrittenCABundle(t *testing.T) {
	r := testredis.Start(t, testredis.Options{TLS: true})
	other := testredis.NewTLSFiles(t, t.TempDir())
	ca, err := os.ReadFile(r.TLS.CA)
	if err != nil {
		t.Fatal(err)
	}
	newCA, err := os.ReadFile(other.CA)
	if err != nil {
		t.Fatal(err)
	}
	bundle := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(bundle, ca, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := conf.Redis{TLS: true, TLSCAFile: bundle, TLSCertFile: r.TLS.ClientCert, TLSKeyFile: r.TLS.ClientKey}
	core, logs := observer.New(zap.WarnLevel)
	d, err := newRedisTLSDialer(cfg.TLSConfigFrom, cfg.TLSFiles(), time.Second, zap.New(core), nil)
	if err != nil {
		t.Fatal(err)
	}
	half := append(append([]byte{}, newCA...), ca[:len(ca)/2]...)
	if err := os.WriteFile(bundle, half, 0o600); err != nil {
		t.Fatal(err)
	}
	if got := d.filesRead(); got != 0 {
		t.Fatalf("combo_redis_tls_files_read %v with the CA bundle half written, want 0", got)
	}
	warned := logs.FilterMessageSnippet("could not read the redis.tls_* files again")
	if warned.Len() != 1 || !strings.Contains(fmt.Sprint(warned.All()[0].ContextMap()["error"]), "redis.tls_ca_file") {
		t.Fatalf("warnings %v, want one naming redis.tls_ca_file", logs.All())
	}
	c := redis.NewClient(&redis.Options{Addr: r.Addr, Dialer: d.Dial, MaxRetries: -1})
	defer c.Close()
	if err := c.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("PING with the CA bundle half written: %v, want the bundle last read whole", err)
	}
	if err := os.WriteFile(bundle, append(append([]byte{}, newCA...), ca...), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := d.filesRead(); got != 1 {
		t.Fatalf("combo_redis_tls_files_read %v with the bundle whole, want 1", got)
	}
}

// openTLSGauges opens the service's Redis client with cfg's redis.tls_*
// files (to an address never dialed) and returns a scrape of the gauges
// it exports, by name; the client is closed at the test's end.
func openTLSGauges(t *testing.T, cfg conf.Redis) func() map[string]float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	c := conf.Default()
	c.Redis.Addr = "127.0.0.1:1" // not dialed
	c.Redis.TLS, c.Redis.TLSCAFile, c.Redis.TLSCertFile, c.Redis.TLSKeyFile = true, cfg.TLSCAFile, cfg.TLSCertFile, cfg.TLSKeyFile
	_, _, closeAll, err := openRedis(c, zap.NewNop(), reg, metrics.New(prometheus.NewRegistry()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeAll)
	return func() map[string]float64 {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		exported := map[string]float64{}
		for _, mf := range mfs {
			exported[mf.GetName()] = mf.GetMetric()[0].GetGauge().GetValue()
		}
		return exported
	}
}
