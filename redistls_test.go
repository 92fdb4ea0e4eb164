package main

import (
	"crypto/tls"
	"os"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/combo-service/combo-service/conf"
	"github.com/combo-service/combo-service/internal/testredis"
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

// A rotation that rewrites the files one at a time, with dials between,
// is two changes (the CA, then the client certificate), each noted: the
// note of the certificate, with its expiry, is the one that says the
// rotation is done, and it must not be thinned as a repeat of the first.
func TestRedisTLSDialerNotesEachChangeOfTheFiles(t *testing.T) {
	old := testredis.NewTLSFiles(t, t.TempDir())
	cfg := conf.Redis{TLS: true, TLSCAFile: old.CA, TLSCertFile: old.ClientCert, TLSKeyFile: old.ClientKey}
	core, logs := observer.New(zap.InfoLevel)
	d, err := newRedisTLSDialer(cfg.TLSConfig, time.Second, zap.New(core))
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
