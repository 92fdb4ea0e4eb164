package conf

import (
	"crypto/ecdh"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/combo-service/combo-service/internal/testredis"
)

func TestTLSOffByDefault(t *testing.T) {
	c := Default()
	c.Redis.Addr = "10.0.0.1:6379"
	got, err := c.Redis.TLSConfig()
	if err != nil || got != nil {
		t.Fatalf("TLSConfig() = %v, %v; want plain TCP", got, err)
	}
}

func TestTLSFromEnvironment(t *testing.T) {
	pki := testredis.NewTLSFiles(t, t.TempDir())
	t.Setenv("COMBO_REDIS_ADDR", "redis.example.internal:6380")
	t.Setenv("COMBO_REDIS_TLS", "true")
	t.Setenv("COMBO_REDIS_TLS_CA_FILE", pki.CA)
	t.Setenv("COMBO_REDIS_TLS_CERT_FILE", pki.ClientCert)
	t.Setenv("COMBO_REDIS_TLS_KEY_FILE", pki.ClientKey)
	t.Setenv("COMBO_REDIS_TLS_SERVER_NAME", "localhost")
	c, err := Load("")
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.Redis.TLSConfig()
	if err != nil {
		t.Fatal(err)
	}
	if got.ServerName != "localhost" || got.RootCAs == nil || len(got.Certificates) != 1 || got.MinVersion != tls.VersionTLS12 {
		t.Fatalf("TLSConfig() = %+v", got)
	}
	if names := UnknownEnv(os.Environ()); len(names) != 0 {
		t.Fatalf("redis.tls_* variables reported unknown: %v", names)
	}
}

// A system CA (a managed Redis's public certificate) needs no file.
func TestTLSWithSystemRoots(t *testing.T) {
	c := Default()
	c.Redis.Addr, c.Redis.TLS = "redis.example.internal:6380", true
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	got, err := c.Redis.TLSConfig()
	if err != nil || got == nil || got.RootCAs != nil || got.ServerName != "" {
		t.Fatalf("TLSConfig() = %+v, %v; want system roots, the host of each address", got, err)
	}
}

// A server name that no certificate can carry (a port, a URL) passed the
// start and failed every dial; the names Go's verification takes pass.
func TestTLSServerNames(t *testing.T) {
	for _, name := range []string{"redis.example.internal", "localhost", "10.0.0.1", "::1", "[::1]", "redis-0.redis_svc.local."} {
		c := Default()
		c.Redis.Addr, c.Redis.TLS, c.Redis.TLSServerName = "10.0.0.1:6380", true, name
		if err := c.Validate(); err != nil {
			t.Errorf("tls_server_name %q: %v", name, err)
		}
	}
}

func TestTLSSettingsAreChecked(t *testing.T) {
	pki := testredis.NewTLSFiles(t, t.TempDir())
	other := testredis.NewTLSFiles(t, t.TempDir())
	notPEM := filepath.Join(t.TempDir(), "ca.txt")
	if err := os.WriteFile(notPEM, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(t.TempDir(), "missing.crt")
	encrypted := filepath.Join(t.TempDir(), "enc.key")
	if err := os.WriteFile(encrypted, []byte("-----BEGIN ENCRYPTED PRIVATE KEY-----\nMIIBAA==\n-----END ENCRYPTED PRIVATE KEY-----\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// OpenSSL's older form: the block's headers say it is encrypted.
	legacyEncrypted := filepath.Join(t.TempDir(), "legacy-enc.key")
	if err := os.WriteFile(legacyEncrypted, []byte("-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\n"+
		"DEK-Info: AES-128-CBC,00112233445566778899AABBCCDDEEFF\n\nMIIBAA==\n-----END RSA PRIVATE KEY-----\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A first block that does not parse, then the good certificate: the
	// leaf X509KeyPair takes is the broken one, and the key is fine.
	good, err := os.ReadFile(pki.ClientCert)
	if err != nil {
		t.Fatal(err)
	}
	brokenFirst := filepath.Join(t.TempDir(), "broken-first.crt")
	if err := os.WriteFile(brokenFirst, append([]byte("-----BEGIN CERTIFICATE-----\nMIIBAA==\n-----END CERTIFICATE-----\n"), good...), 0o600); err != nil {
		t.Fatal(err)
	}
	// X25519, which x509 parses and TLS cannot use: the key's fault.
	x, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(x)
	if err != nil {
		t.Fatal(err)
	}
	x25519 := filepath.Join(t.TempDir(), "x25519.key")
	if err := os.WriteFile(x25519, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		mutate func(r *Redis)
		want   []string // each in the error
	}{
		{"a file without redis.tls", func(r *Redis) { r.TLS, r.TLSCAFile = false, pki.CA },
			[]string{"redis.tls_ca_file: is set but redis.tls is false"}},
		{"a server name without redis.tls", func(r *Redis) { r.TLS, r.TLSServerName = false, "localhost" },
			[]string{"redis.tls_server_name: is set but redis.tls is false"}},
		{"the embedded Redis", func(r *Redis) { r.Addr = "" },
			[]string{"redis.tls: needs redis.addr, redis.addrs or redis.sentinel_addrs"}},
		{"a certificate without its key", func(r *Redis) { r.TLSKeyFile = "" },
			[]string{"redis.tls_cert_file: and redis.tls_key_file go together"}},
		{"a key without its certificate", func(r *Redis) { r.TLSCertFile = "" },
			[]string{"redis.tls_cert_file: and redis.tls_key_file go together"}},
		{"a CA file that is missing", func(r *Redis) { r.TLSCAFile = missing },
			[]string{"redis.tls_ca_file: open " + missing}},
		{"a CA file that holds no certificate", func(r *Redis) { r.TLSCAFile = notPEM },
			[]string{"redis.tls_ca_file: " + notPEM + " holds no PEM certificate"}},
		{"a server name with a port", func(r *Redis) { r.TLSServerName = "redis.example.internal:6380" },
			[]string{"redis.tls_server_name: must be a host name or an IP address"}},
		{"a server name given as a URL", func(r *Redis) { r.TLSServerName = "rediss://redis.example.internal" },
			[]string{"redis.tls_server_name: must be a host name or an IP address"}},
		{"a server name with a space", func(r *Redis) { r.TLSServerName = " redis.example.internal" },
			[]string{"redis.tls_server_name: must be a host name or an IP address"}},
		{"a certificate file that is missing", func(r *Redis) { r.TLSCertFile = missing },
			[]string{"redis.tls_cert_file: open " + missing}},
		{"a key file that is missing", func(r *Redis) { r.TLSKeyFile = missing },
			[]string{"redis.tls_key_file: open " + missing}},
		{"a key of another certificate", func(r *Redis) { r.TLSKeyFile = other.ClientKey },
			[]string{"redis.tls_cert_file: " + pki.ClientCert + " with redis.tls_key_file " + other.ClientKey + ": ", "private key does not match public key"}},
		{"a key file that holds no key", func(r *Redis) { r.TLSKeyFile = notPEM },
			[]string{"redis.tls_key_file: " + notPEM + " tls: "}},
		{"a key file that holds a certificate", func(r *Redis) { r.TLSKeyFile = pki.ClientCert },
			[]string{"redis.tls_key_file: " + pki.ClientCert + " tls: "}},
		{"an encrypted key", func(r *Redis) { r.TLSKeyFile = encrypted },
			[]string{"redis.tls_key_file: " + encrypted + " tls: ", "(an encrypted key: the service takes it unencrypted)"}},
		{"a legacy encrypted key", func(r *Redis) { r.TLSKeyFile = legacyEncrypted },
			[]string{"redis.tls_key_file: " + legacyEncrypted + " tls: ", "(an encrypted key: the service takes it unencrypted)"}},
		{"an X25519 key", func(r *Redis) { r.TLSKeyFile = x25519 },
			[]string{"redis.tls_key_file: " + x25519 + " tls: "}},
		{"a certificate file whose first block is broken", func(r *Redis) { r.TLSCertFile = brokenFirst },
			[]string{"redis.tls_cert_file: " + brokenFirst + " x509: "}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			c.Redis.Addr, c.Redis.TLS = "10.0.0.1:6380", true
			c.Redis.TLSCAFile, c.Redis.TLSCertFile, c.Redis.TLSKeyFile = pki.CA, pki.ClientCert, pki.ClientKey
			if err := c.Validate(); err != nil {
				t.Fatalf("the unchanged settings must be valid: %v", err)
			}
			tc.mutate(&c.Redis)
			err := c.Validate()
			if err == nil {
				t.Fatal("Validate() = nil")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("Validate() = %q, want it to say %q", err, w)
				}
			}
		})
	}
}

// COMBO_REDIS_TLS= (an orchestrator's unset template variable) is no
// choice between TLS and plain TCP: it must not quietly turn off the
// file's tls: true, and dial plain TCP, sending the password in clear.
func TestTLSEmptyVariableIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "combo.yaml")
	if err := os.WriteFile(path, []byte("redis:\n  addr: redis.example.internal:6380\n  tls: true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if c, err := Load(path); err != nil || !c.Redis.TLS {
		t.Fatalf("tls: true: %+v %v", c.Redis, err)
	}
	for _, v := range []string{"", " "} {
		t.Setenv("COMBO_REDIS_TLS", v)
		c, err := Load(path)
		if err == nil || !strings.Contains(err.Error(), "redis.tls") || !strings.Contains(err.Error(), "want true or false") {
			t.Errorf("COMBO_REDIS_TLS=%q: Load() = tls %v, %v; want an error naming redis.tls", v, c.Redis.TLS, err)
		}
	}
	t.Setenv("COMBO_REDIS_TLS", "false") // a choice: honoured
	if c, err := Load(path); err != nil || c.Redis.TLS {
		t.Fatalf("COMBO_REDIS_TLS=false: %+v %v", c.Redis, err)
	}
}

// The client certificate's leaf is parsed even where tls.LoadX509KeyPair
// leaves it out (GODEBUG=x509keypairleaf=0): without it the expiry metric
// read 0, long expired, and its alert fired at once.
func TestTLSClientCertificateLeafIsParsed(t *testing.T) {
	t.Setenv("GODEBUG", "x509keypairleaf=0")
	pki := testredis.NewTLSFiles(t, t.TempDir())
	cfg, err := Redis{TLS: true, TLSCertFile: pki.ClientCert, TLSKeyFile: pki.ClientKey}.TLSConfig()
	if err != nil {
		t.Fatal(err)
	}
	if leaf := cfg.Certificates[0].Leaf; leaf == nil || leaf.Subject.CommonName != "testredis client" {
		t.Fatalf("client certificate leaf %v, want the parsed testredis client certificate", leaf)
	}
}

// A CA bundle is read as Go's own reader reads it, text around the blocks
// and a block Go cannot parse skipped, but one that ends in a block cut
// short (a BEGIN line with no END: a file caught half rewritten) is not
// read whole.
func TestCABundleIsReadWholeOrRefused(t *testing.T) {
	pki := testredis.NewTLSFiles(t, t.TempDir())
	ca, err := os.ReadFile(pki.CA)
	if err != nil {
		t.Fatal(err)
	}
	unparsable := "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"
	for name, tc := range map[string]struct {
		data string
		ok   bool
	}{
		"a comment after the last block":    {string(ca) + "# end of bundle\n", true},
		"a block Go cannot parse beside it": {unparsable + string(ca), true},
		"Windows line endings":              {strings.ReplaceAll(string(ca), "\n", "\r\n"), true},
		"a block cut short after it":        {string(ca) + string(ca[:len(ca)/2]), false},
		"nothing but a cut block":           {string(ca[:len(ca)/2]), false},
	} {
		path := filepath.Join(t.TempDir(), "ca.crt")
		if err := os.WriteFile(path, []byte(tc.data), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := Redis{TLS: true, TLSCAFile: path}.TLSConfig()
		if (err == nil) != tc.ok || (err != nil && !strings.Contains(err.Error(), "redis.tls_ca_file")) {
			t.Errorf("%s: %v; want ok %v (an error naming redis.tls_ca_file)", name, err, tc.ok)
		}
	}
}

// Every CA of a bundle is trusted: during a CA rotation the file holds the
// old and the new.
func TestCABundleTrustsEveryCA(t *testing.T) {
	old, next := testredis.NewTLSFiles(t, t.TempDir()), testredis.NewTLSFiles(t, t.TempDir())
	var bundle []byte
	for _, p := range []string{old.CA, next.CA} {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		bundle = append(bundle, b...)
	}
	path := filepath.Join(t.TempDir(), "bundle.crt")
	if err := os.WriteFile(path, bundle, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := Redis{TLS: true, TLSCAFile: path}.TLSConfig()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{old.ServerCert, next.ServerCert} {
		raw, _ := os.ReadFile(p)
		b, _ := pem.Decode(raw)
		cert, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cert.Verify(x509.VerifyOptions{Roots: cfg.RootCAs, DNSName: "localhost"}); err != nil {
			t.Errorf("%s not trusted by the bundle: %v", p, err)
		}
	}
}

// A client certificate file cut short (a chain half rewritten) is refused
// naming redis.tls_cert_file, as a CA bundle is.
func TestClientCertificateCutShortIsRefused(t *testing.T) {
	pki := testredis.NewTLSFiles(t, t.TempDir())
	cert, err := os.ReadFile(pki.ClientCert)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "client.crt")
	if err := os.WriteFile(path, append(cert, cert[:len(cert)/2]...), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Redis{TLS: true, TLSCertFile: path, TLSKeyFile: pki.ClientKey}.TLSConfig()
	if err == nil || !strings.Contains(err.Error(), "redis.tls_cert_file") {
		t.Fatalf("want an error naming redis.tls_cert_file, got %v", err)
	}
}

// A broken key below a comment that says ENCRYPTED is no encrypted key:
// the hint goes by the PEM's own header only.
func TestBrokenKeyIsNotCalledEncrypted(t *testing.T) {
	pki := testredis.NewTLSFiles(t, t.TempDir())
	says := filepath.Join(t.TempDir(), "says.key")
	if err := os.WriteFile(says, []byte("# not ENCRYPTED\n-----BEGIN PRIVATE KEY-----\nMIIBAA==\n-----END PRIVATE KEY-----\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := Default()
	c.Redis.Addr, c.Redis.TLS = "10.0.0.1:6380", true
	c.Redis.TLSCAFile, c.Redis.TLSCertFile, c.Redis.TLSKeyFile = pki.CA, pki.ClientCert, says
	err := c.Validate()
	if err == nil || !strings.Contains(err.Error(), "redis.tls_key_file: "+says+" tls: failed to parse private key") ||
		strings.Contains(err.Error(), "encrypted") {
		t.Fatalf("Validate() = %v; want the key file named, not called encrypted", err)
	}
}
