package conf

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
)

// TLSConfig returns how to dial Redis over TLS, or nil when redis.tls is
// off. It reads the files redis.tls_* name; an error names the key.
func (r Redis) TLSConfig() (*tls.Config, error) { return r.TLSConfigFrom(os.ReadFile) }

// TLSConfigFrom is TLSConfig with each file's contents as read gives them.
// A caller that has read the files already, to see whether they changed,
// passes those bytes: what it parses is then what it compared, not the
// files as a rotation may have left them a moment later.
func (r Redis) TLSConfigFrom(read func(path string) ([]byte, error)) (*tls.Config, error) {
	cfg, key, err := r.tlsConfig(read)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	return cfg, nil
}

// notAPath says why path cannot be a file's path and is not repeated, or
// "": it holds a PEM block, or a part longer than a file name may be (255
// bytes on Linux; "file name too long"), as base64 data does. A path
// that merely ends in a newline is shown by the read's error, which points
// at it.
func notAPath(path string) string {
	if strings.Contains(path, "-----BEGIN") {
		return "holds a PEM file's contents, not its path: give the file's path (not repeated here, as it may hold a private key)"
	}
	for part := range strings.SplitSeq(path, "/") {
		if len(part) > 255 {
			return fmt.Sprintf("is no file's path (a part of %d bytes, where a file name has at most 255: a file's contents, base64?): give the file's path (not repeated here, as it may hold a private key)", len(part))
		}
	}
	return ""
}

// TLSFiles are the paths TLSConfig reads (none when redis.tls is off).
func (r Redis) TLSFiles() []string {
	var files []string
	for _, f := range []string{r.TLSCAFile, r.TLSCertFile, r.TLSKeyFile} {
		if r.TLS && f != "" {
			files = append(files, f)
		}
	}
	return files
}

func (r Redis) tlsConfig(read func(path string) ([]byte, error)) (cfg *tls.Config, key string, err error) {
	if !r.TLS {
		return nil, "", nil
	}
	// A file's contents given for its path (a secret's value put in
	// COMBO_REDIS_TLS_KEY_FILE, as PEM or as a Secret's base64 data) would
	// be printed whole in the error of its reading: the private key.
	for _, f := range []struct{ key, path string }{
		{"redis.tls_ca_file", r.TLSCAFile}, {"redis.tls_cert_file", r.TLSCertFile}, {"redis.tls_key_file", r.TLSKeyFile},
	} {
		if msg := notAPath(f.path); msg != "" {
			return nil, f.key, errors.New(msg)
		}
	}
	// tls.Dial fills in ServerName from each address when it is empty, so
	// each node of a cluster is checked against its own host.
	cfg = &tls.Config{MinVersion: tls.VersionTLS12, ServerName: r.TLSServerName}
	if r.TLSCAFile != "" {
		pem, err := read(r.TLSCAFile)
		if err != nil {
			return nil, "redis.tls_ca_file", err
		}
		certs, err := wholePEMCertificates(pem)
		if err != nil {
			return nil, "redis.tls_ca_file", fmt.Errorf("%s %w", r.TLSCAFile, err)
		}
		cfg.RootCAs = x509.NewCertPool()
		for _, c := range certs {
			cfg.RootCAs.AddCert(c)
		}
	}
	if r.TLSCertFile != "" || r.TLSKeyFile != "" {
		certPEM, err := read(r.TLSCertFile)
		if err != nil {
			return nil, "redis.tls_cert_file", err
		}
		if _, err := wholePEMCertificates(certPEM); err != nil {
			return nil, "redis.tls_cert_file", fmt.Errorf("%s %w", r.TLSCertFile, err)
		}
		keyPEM, err := read(r.TLSKeyFile)
		if err != nil {
			return nil, "redis.tls_key_file", err
		}
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		switch {
		case err != nil && strings.Contains(err.Error(), "does not match"):
			return nil, "redis.tls_cert_file", fmt.Errorf("%s with redis.tls_key_file %s: %w", r.TLSCertFile, r.TLSKeyFile, err)
		case err != nil && keyFault(err):
			// The key file holds no key, or a broken one: naming the
			// certificate's file sent the operator to the wrong place.
			hint := ""
			if bytes.Contains(keyPEM, []byte("-----BEGIN ENCRYPTED")) || bytes.Contains(keyPEM, []byte("Proc-Type: 4,ENCRYPTED")) {
				hint = " (an encrypted key: the service takes it unencrypted)"
			}
			return nil, "redis.tls_key_file", fmt.Errorf("%s %w%s", r.TLSKeyFile, err, hint)
		case err != nil:
			// The leaf: wholePEMCertificates passes over a block it cannot
			// parse, X509KeyPair takes the first as the leaf.
			return nil, "redis.tls_cert_file", fmt.Errorf("%s %w", r.TLSCertFile, err)
		}
		if cert.Leaf == nil { // GODEBUG=x509keypairleaf=0: the expiry metric and logs read it
			if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
				return nil, "redis.tls_cert_file", err
			}
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, "", nil
}

// keyFault says whether X509KeyPair's err is about the key's PEM alone.
func keyFault(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "key input") || strings.Contains(msg, "rather than a key") ||
		strings.Contains(msg, "parse private key") || strings.Contains(msg, "unknown private key type")
}

// wholePEMCertificates parses the PEM certificates of data, as
// x509.CertPool.AppendCertsFromPEM does (text around the blocks, and a
// block Go cannot parse, are skipped), and refuses data that ends in a
// block cut short: a BEGIN line with no END. AppendCertsFromPEM and
// tls.X509KeyPair stop quietly there: a CA bundle caught half rewritten
// (the new CA whole, the old one cut) was taken as read whole, and new
// connections were refused by a Redis whose certificate the old CA signed.
func wholePEMCertificates(data []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	rest := data
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue // a key or parameters beside the certificates
		}
		if c, err := x509.ParseCertificate(block.Bytes); err == nil {
			certs = append(certs, c)
		}
	}
	if bytes.Contains(rest, []byte("-----BEGIN")) {
		return nil, fmt.Errorf("ends in a PEM block cut short, after %d whole certificates (a file half written?)", len(certs))
	}
	if len(certs) == 0 {
		return nil, errors.New("holds no PEM certificate")
	}
	return certs, nil
}

// validateTLS refuses redis.tls_* settings that would be ignored or could
// not be used, and loads the files so a wrong one is named at start, not
// on the first dial.
func validateTLS(c Config, bad func(key, format string, args ...any)) {
	r := c.Redis
	if !r.TLS {
		for _, s := range []struct{ key, value string }{
			{"redis.tls_ca_file", r.TLSCAFile}, {"redis.tls_server_name", r.TLSServerName},
			{"redis.tls_cert_file", r.TLSCertFile}, {"redis.tls_key_file", r.TLSKeyFile},
		} {
			if s.value != "" {
				bad(s.key, "is set but redis.tls is false: set redis.tls to dial Redis over TLS")
			}
		}
		return
	}
	if c.Embedded() {
		bad("redis.tls", "needs redis.addr, redis.addrs or redis.sentinel_addrs: the embedded Redis speaks plain TCP")
		return
	}
	if n := r.TLSServerName; n != "" && !validServerName(n) {
		bad("redis.tls_server_name", "must be a host name or an IP address, without port, scheme or spaces, got %q: "+
			"no certificate carries it, and every dial would fail", n)
	}
	if (r.TLSCertFile == "") != (r.TLSKeyFile == "") {
		bad("redis.tls_cert_file", "and redis.tls_key_file go together: set both (a client certificate) or neither")
		return
	}
	if _, key, err := r.tlsConfig(os.ReadFile); err != nil {
		bad(key, "%v", err)
	}
}

// validServerName reports whether name can be matched against a
// certificate: an IP address (bracketed or not), or a host name of
// letters, digits, '-', '_' and '.'. A port or a URL ("host:6380",
// "rediss://host") passed the start and failed each dial.
func validServerName(name string) bool {
	if net.ParseIP(strings.TrimSuffix(strings.TrimPrefix(name, "["), "]")) != nil {
		return true
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}
