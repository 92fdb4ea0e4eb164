package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"net"
	"os"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/combo-service/combo-service/internal/logging"
)

// redisTLSDialer dials Redis over TLS with the redis.tls_* files as they are
// at each dial. Certificates get rotated in place while the service runs
// (cert-manager renewing a Secret, a managed Redis moving to a new CA);
// with the files read once at start, every dial after Redis took the new
// ones failed until the service was restarted. Connections are pooled, so
// dials are few (a pool filling up, a dead connection replaced), and reading
// three small files is little beside a TLS handshake; each metrics scrape
// reads them too (clientCertificateExpiry). They are parsed again only when
// their bytes changed. A connection already open keeps what it was made
// with.
type redisTLSDialer struct {
	load    tlsLoad
	files   []string      // the paths load reads (conf.Redis.TLSFiles)
	timeout time.Duration // redis.timeout: TCP connect and handshake
	log     *zap.Logger   // each change of the files: few, and none a repeat
	warn    *zap.Logger   // sampled: a broken file is seen at every dial

	mu   sync.Mutex  // held while the files are read
	last *tls.Config // the files as last read whole
	// lastBytes are the bytes last was parsed from: while the files still
	// hold these, last is what load would give, and parsing them again is
	// spared. A CA file that is a system bundle (ca-certificates.crt, 140
	// certificates) takes about 5 ms to parse, under mu, at every dial and
	// scrape; reading it, 0.05 ms.
	lastBytes [][]byte
}

// tlsLoad is conf.Redis.TLSConfigFrom: it parses the redis.tls_* files
// with the contents read gives.
type tlsLoad func(read func(path string) ([]byte, error)) (*tls.Config, error)

// go-redis's own dialer's keep-alives (its defaultKeepAliveConfig): a dead
// peer is found in about 45 s even on an idle pooled connection.
var redisKeepAlive = net.KeepAliveConfig{Enable: true, Idle: 30 * time.Second, Interval: 5 * time.Second, Count: 3}

// newRedisTLSDialer reads the files once; their errors are the caller's.
// files are the paths load reads; with none given, every dial and scrape
// loads the files again. The warnings log leaves out as repeats are
// counted by suppressed (may be nil).
func newRedisTLSDialer(load tlsLoad, files []string, timeout time.Duration, log *zap.Logger, suppressed logging.Suppressed) (*redisTLSDialer, error) {
	d := &redisTLSDialer{load: load, files: files, timeout: timeout, log: log, warn: logging.Sampled(log, suppressed)}
	var read func(string) ([]byte, error)
	d.lastBytes, read = d.readFiles()
	cfg, err := load(read)
	if err != nil {
		return nil, err
	}
	d.last = cfg
	return d, nil
}

// Dial is a go-redis Options.Dialer. Like go-redis's own TLS dial, the
// timeout bounds the connect and the handshake together, and an empty
// redis.tls_server_name checks the certificate against addr's host.
func (d *redisTLSDialer) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	td := &tls.Dialer{
		NetDialer: &net.Dialer{Timeout: d.timeout, KeepAliveConfig: redisKeepAlive},
		Config:    d.config(),
	}
	conn, err := td.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return checkable(conn.(*tls.Conn)), nil
}

// clientCertificateExpiry reads the files again and returns when the
// client certificate they hold expires, in unix seconds (0: none). Each
// metrics scrape calls it, so a renewal (or a rotation that keeps failing
// to read) shows within a scrape, however long the pool goes without a
// dial.
func (d *redisTLSDialer) clientCertificateExpiry() float64 {
	cfg := d.config()
	if len(cfg.Certificates) == 0 || cfg.Certificates[0].Leaf == nil {
		return 0
	}
	return float64(cfg.Certificates[0].Leaf.NotAfter.Unix())
}

// config reads the files again. While they do not read whole (a rotation
// half written: the new certificate beside the old key), it keeps dialing
// with the last ones that did, and warns.
//
// The files are read under mu: two dials reading at once, one before a
// rotation and one after, could otherwise compare in the other order, and
// the change be noted twice more, with last back to the old files.
// Reading three small files is short beside the handshake that follows.
func (d *redisTLSDialer) config() *tls.Config {
	cfg, _ := d.reread()
	return cfg
}

// filesRead reads the files again and reports 1 if they read whole, 0 if
// new connections go on with the files last read whole. Each metrics
// scrape calls it: a renewal that keeps failing shows, and alerts, however
// long the pool goes without a dial.
func (d *redisTLSDialer) filesRead() float64 {
	if _, err := d.reread(); err != nil {
		return 0
	}
	return 1
}

// reread is config, with the error of a reread that failed.
func (d *redisTLSDialer) reread() (*tls.Config, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	// load parses the bytes compared here, not the files read from disk
	// again: a rotation that wrote other files in between, then wrote
	// these very bytes back, would leave those other files in use, taken
	// for these.
	now, read := d.readFiles()
	if now != nil && slices.EqualFunc(now, d.lastBytes, bytes.Equal) {
		return d.last, nil
	}
	cfg, err := d.load(read)
	if err != nil {
		d.warn.Warn("could not read the redis.tls_* files again: dialing Redis with those read before", zap.Error(err))
		return d.last, err
	}
	d.lastBytes = now
	if !sameTLSFiles(d.last, cfg) {
		fields := []zap.Field{}
		if len(cfg.Certificates) > 0 && cfg.Certificates[0].Leaf != nil {
			fields = append(fields, zap.Time("client_certificate_expires", cfg.Certificates[0].Leaf.NotAfter))
		}
		d.log.Info("the redis.tls_* files changed: new connections to Redis use them", fields...)
	}
	d.last = cfg
	return cfg, nil
}

// readFiles reads d.files once and returns their bytes, nil when there
// are none or one cannot be read, and a reader for load that serves those
// bytes, or the error of a file that could not be read (load then says
// which, and why). A path not among d.files is read from disk.
func (d *redisTLSDialer) readFiles() ([][]byte, func(path string) ([]byte, error)) {
	data := make([][]byte, len(d.files))
	errs := make([]error, len(d.files))
	for i, f := range d.files {
		data[i], errs[i] = os.ReadFile(f)
	}
	read := func(path string) ([]byte, error) {
		if i := slices.Index(d.files, path); i >= 0 {
			return data[i], errs[i]
		}
		return os.ReadFile(path)
	}
	if len(d.files) == 0 || slices.ContainsFunc(errs, func(err error) bool { return err != nil }) {
		return nil, read
	}
	return data, read
}

// sameTLSFiles reports whether a and b trust the same CAs and present the
// same client certificate.
func sameTLSFiles(a, b *tls.Config) bool {
	if !a.RootCAs.Equal(b.RootCAs) || len(a.Certificates) != len(b.Certificates) {
		return false
	}
	for i := range a.Certificates {
		ca, cb := a.Certificates[i].Certificate, b.Certificates[i].Certificate
		if len(ca) == 0 || len(cb) == 0 || string(ca[0]) != string(cb[0]) {
			return false
		}
	}
	return true
}
