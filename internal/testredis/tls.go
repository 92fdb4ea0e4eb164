package testredis

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TLSFiles are the PEM files of a throwaway PKI for one test: a CA, a
// server certificate for 127.0.0.1 and localhost signed by it, and a client
// certificate signed by it too.
type TLSFiles struct {
	CA                    string
	ServerCert, ServerKey string
	ClientCert, ClientKey string
}

// NewTLSFiles writes a new CA and the certificates it signs into dir, all
// valid for a day.
func NewTLSFiles(tb testing.TB, dir string) TLSFiles {
	tb.Helper()
	return NewTLSFilesUntil(tb, dir, time.Now().Add(24*time.Hour))
}

// NewTLSFilesUntil is NewTLSFiles with certificates that expire at notAfter.
func NewTLSFilesUntil(tb testing.TB, dir string, notAfter time.Time) TLSFiles {
	tb.Helper()
	f := TLSFiles{
		CA:         filepath.Join(dir, "ca.crt"),
		ServerCert: filepath.Join(dir, "server.crt"), ServerKey: filepath.Join(dir, "server.key"),
		ClientCert: filepath.Join(dir, "client.crt"), ClientKey: filepath.Join(dir, "client.key"),
	}
	now := time.Now()
	caKey := newKey(tb)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "testredis CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: notAfter,
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		tb.Fatalf("testredis: CA certificate: %v", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		tb.Fatalf("testredis: CA certificate: %v", err)
	}
	writePEM(tb, f.CA, "CERTIFICATE", caDER)
	leaf := func(serial int64, name string, usage []x509.ExtKeyUsage, certFile, keyFile string) {
		key := newKey(tb)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: now.Add(-time.Hour), NotAfter: notAfter,
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: usage,
			DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			tb.Fatalf("testredis: %s certificate: %v", name, err)
		}
		keyDER, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			tb.Fatalf("testredis: %s key: %v", name, err)
		}
		writePEM(tb, certFile, "CERTIFICATE", der)
		writePEM(tb, keyFile, "PRIVATE KEY", keyDER)
	}
	// A cluster node dials its peers' bus with its server certificate.
	leaf(2, "testredis server", []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, f.ServerCert, f.ServerKey)
	leaf(3, "testredis client", []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, f.ClientCert, f.ClientKey)
	return f
}

// ClientConfig trusts the CA and presents the client certificate.
func (f TLSFiles) ClientConfig(tb testing.TB) *tls.Config {
	tb.Helper()
	pemCA, err := os.ReadFile(f.CA)
	if err != nil {
		tb.Fatalf("testredis: %v", err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pemCA)
	cert, err := tls.LoadX509KeyPair(f.ClientCert, f.ClientKey)
	if err != nil {
		tb.Fatalf("testredis: %v", err)
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
}

func newKey(tb testing.TB) *ecdsa.PrivateKey {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatalf("testredis: key: %v", err)
	}
	return key
}

func writePEM(tb testing.TB, path, typ string, der []byte) {
	tb.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		tb.Fatalf("testredis: %v", err)
	}
}
