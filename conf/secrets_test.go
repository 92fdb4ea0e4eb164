package conf

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/combo-service/combo-service/internal/testredis"
)

// A password written in a flow section without the space after its colon
// (password:s3cret, or password=s3cret) is YAML for one key,
// "password:s3cret", with a null value: refuseNulls named it as an unknown
// key, the secret in the name, in an error that -check-config and a start
// print. The same as 7b7dcfb's top-level map, one level down. Now the
// section is named, and the key not repeated. With a value after it
// ("password:s3cret: x"), the decoder named it ("'redis' has invalid
// keys: password:s3cret"), and at the top level, with a map after it,
// refuseNulls did.
func TestLoadDoesNotRepeatAPasswordWrittenWithoutItsSpace(t *testing.T) {
	for _, yaml := range []string{
		"redis: {addr: \"h:6379\", password:s3cret}\n",
		"redis: {addr: \"h:6379\", password:'s3cret'}\n",
		"redis: {addr: \"h:6379\", password=s3cret}\n",
		"redis: {sentinel_addrs: [\"h:26379\"], sentinel_master: m, sentinel_password:s3cret}\n",
		"{redis: {addr: \"h:6379\", password:s3cret}}\n",
		"redis:\n  addr: \"h:6379\"\n  <<: {password:s3cret}\n",
		"redis: {addr: \"h:6379\", password:s3cret: x}\n",
		"password:s3cret: {x: 1}\n",
	} {
		_, err := Load(writeConf(t, yaml))
		if err == nil || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("Load(%q): %v; want a refusal without the password", yaml, err)
		}
	}
}

// redis.tls_key_file given the key itself, not its path (a secret's
// value put in COMBO_REDIS_TLS_KEY_FILE): the refusal must not print the
// private key, as os.ReadFile's "open <name>: ..." did. The same for
// the CA's and the certificate's files, whose PEM printed whole buried
// the line that says what to fix.
func TestTLSKeyGivenForItsPathIsNotRepeated(t *testing.T) {
	pki := testredis.NewTLSFiles(t, t.TempDir())
	for _, tc := range []struct {
		key  string
		file string
		set  func(r *Redis, pem string)
	}{
		{"redis.tls_ca_file", pki.CA, func(r *Redis, pem string) { r.TLSCAFile = pem }},
		{"redis.tls_cert_file", pki.ClientCert, func(r *Redis, pem string) { r.TLSCertFile = pem }},
		{"redis.tls_key_file", pki.ClientKey, func(r *Redis, pem string) { r.TLSKeyFile = pem }},
	} {
		t.Run(tc.key, func(t *testing.T) {
			pem, err := os.ReadFile(tc.file)
			if err != nil {
				t.Fatal(err)
			}
			c := Default()
			c.Redis.Addr, c.Redis.TLS = "10.0.0.1:6380", true
			c.Redis.TLSCAFile, c.Redis.TLSCertFile, c.Redis.TLSKeyFile = pki.CA, pki.ClientCert, pki.ClientKey
			tc.set(&c.Redis, string(pem))
			err = c.Validate()
			body := strings.Split(strings.TrimSpace(string(pem)), "\n")[1]
			if err == nil || !strings.Contains(err.Error(), tc.key+": holds a PEM file's contents") || strings.Contains(err.Error(), body) {
				t.Fatalf("Validate() = %.300v; want %s named without the file's PEM", err, tc.key)
			}
		})
	}
}

// COMBO_CONFIG pointed at the password's own file: YAML reads a string
// where a map goes and quotes its first characters; withoutYAMLValues
// elided a `quoted` value only up to a backtick inside it.
func TestLoadOfAPasswordFileDoesNotRepeatIt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "redis-password")
	if err := os.WriteFile(path, []byte("ab`s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(path)
	if err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("Load: %v; want a refusal without the password", err)
	}
}

// A TLS path that ends in a newline (a ConfigMap value written as a `|`
// block, a variable filled from a file) is a path, not a PEM file's
// contents: the refusal must not send the operator looking for a key
// pasted where its path goes; the read's error shows the path and its
// newline ("open /x/ca.crt\n: no such file or directory").
func TestTLSPathWithTrailingNewlineIsNotCalledPEM(t *testing.T) {
	pki := testredis.NewTLSFiles(t, t.TempDir())
	c := Default()
	c.Redis.Addr, c.Redis.TLS = "10.0.0.1:6380", true
	c.Redis.TLSCAFile, c.Redis.TLSCertFile, c.Redis.TLSKeyFile = pki.CA+"\n", pki.ClientCert, pki.ClientKey
	err := c.Validate()
	if err == nil || !strings.Contains(err.Error(), "redis.tls_ca_file") || strings.Contains(err.Error(), "PEM file's contents") {
		t.Fatalf("Validate() = %v; want redis.tls_ca_file refused as a path that does not exist (it ends in a newline), not as PEM contents", err)
	}
}

// The key's Secret data copied as it is stored (base64, one line, no
// "-----BEGIN") into COMBO_REDIS_TLS_KEY_FILE: os.ReadFile's error
// ("open LS0tLS1CRUdJTi...: file name too long") printed it, and base64
// decodes to the private key.
func TestTLSKeyGivenAsBase64IsNotRepeated(t *testing.T) {
	pki := testredis.NewTLSFiles(t, t.TempDir())
	key, err := os.ReadFile(pki.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	b64 := base64.StdEncoding.EncodeToString(key)
	c := Default()
	c.Redis.Addr, c.Redis.TLS = "10.0.0.1:6380", true
	c.Redis.TLSCAFile, c.Redis.TLSCertFile, c.Redis.TLSKeyFile = pki.CA, pki.ClientCert, b64
	err = c.Validate()
	if err == nil || strings.Contains(err.Error(), b64[20:60]) {
		t.Fatalf("Validate() = %.200v; want redis.tls_key_file refused without its base64 key", err)
	}
}

// A key name with '-' for '_' and no value (a template's
// "sentinel-password:" left for COMBO_REDIS_SENTINEL_PASSWORD) is a
// misspelled key, named ("redis.tls-ca-file: no such key"), not taken for
// a value run into a key and hidden.
func TestHyphenatedNullKeyIsStillNamed(t *testing.T) {
	for _, y := range []string{"redis:\n  tls-ca-file:\n", "redis:\n  sentinel-password:\n"} {
		_, err := Load(writeConf(t, y))
		name := strings.TrimSuffix(strings.TrimPrefix(y, "redis:\n  "), ":\n")
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("Load(%q) = %v; want %s named", y, err, name)
		}
	}
}
