package main

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"net/http"
	"os"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/combo-service/combo-service/conf"
	"github.com/combo-service/combo-service/handler"
	"github.com/combo-service/combo-service/internal/testredis"
	"github.com/combo-service/combo-service/kitex_gen/combo"
)

// On a Redis that takes only TLS and asks for a client certificate (as
// managed Redis services with in-transit encryption do), reports merge
// and the window is pushed as on plain TCP: the request path, the worker
// and the readiness probe all dial with redis.tls_*.
func TestServiceOverTLS(t *testing.T) {
	r := testredis.Start(t, testredis.Options{TLS: true})
	s := startService(t, options{redis: r})
	if code, body := readyz(t, s); code != http.StatusOK {
		t.Fatalf("/readyz: %d %s", code, body)
	}
	var first *combo.Contribution
	a := inOneWindow(t, func(a int64) {
		first = gift(a, 1, "firework", 1)
		s.report(first)
		s.report(gift(a, 1, "firework", 2))
	})
	got := s.pushes.waitFor(1, wait, forActivity(a))
	if rec := got[0].msg.Record; rec.ID != first.Id || rec.Quantity != 3 || rec.ComboCount != 3 {
		t.Fatalf("record %+v, want window %d of quantity (and combo_count) 3 from 2 reports", rec, first.Id)
	}
}

// A Redis certificate that redis.tls_ca_file does not vouch for is never
// trusted: a report fails fast with UNAVAILABLE, nothing is written, and
// /readyz says why.
func TestTLSRefusesAnUntrustedRedis(t *testing.T) {
	r := testredis.Start(t, testredis.Options{TLS: true})
	stranger := testredis.NewTLSFiles(t, t.TempDir()) // another CA, and a client certificate it signed
	s := startService(t, options{redis: r, mutate: func(c *conf.Config) {
		c.Redis.TLSCAFile = stranger.CA
		c.Redis.Timeout = 300 * time.Millisecond
		c.Server.ShutdownTimeout = time.Second // the worker retries its final read until then
	}})
	start := time.Now()
	_, err := s.rpc.ReportContribution(context.Background(),
		&combo.ReportContributionRequest{Contribution: gift(newActivity(), 1, "firework", 1)})
	if ce := comboErr(t, err); ce.Code != handler.CodeUnavailable || !strings.Contains(ce.Message, "certificate") {
		t.Fatalf("report: %+v, want UNAVAILABLE naming the certificate", ce)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("report failed after %s, want about redis.timeout", took)
	}
	code, body := readyz(t, s)
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "certificate") {
		t.Fatalf("/readyz: %d %q, want 503 naming the certificate", code, body)
	}
	if n, err := s.rdb.DBSize(context.Background()).Result(); err != nil || n != 0 {
		t.Fatalf("DBSIZE = %d, %v; want nothing written", n, err)
	}
}

// A Redis Cluster over TLS (the cluster bus too) announces its nodes by
// IP: each is dialed with TLS and its certificate checked against that
// address, and windows spread over the shards (and so the masters) are
// pushed.
func TestRedisClusterOverTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	cluster := testredis.StartTLSCluster(t, 3)
	const shards = 6
	s := startService(t, options{cluster: cluster, mutate: func(c *conf.Config) {
		c.Redis.Shards = shards
		c.Redis.Timeout = 2 * time.Second // as in TestRedisCluster: first dials, TLS handshakes under -race
	}})
	if code, body := readyz(t, s); code != http.StatusOK {
		t.Fatalf("/readyz: %d %s", code, body)
	}
	want := map[int64]int32{} // activity -> quantity; users spread keys over the shards
	for range 12 {
		a := newActivity()
		for u := int64(1); u <= 3; u++ {
			s.report(gift(a, u, "firework", 2))
		}
		want[a] = 6
	}
	for a, q := range want {
		got := s.pushes.waitFor(3, wait, forActivity(a))
		var sum int32
		for _, r := range got {
			sum += r.msg.Record.Quantity
		}
		if sum != q {
			t.Fatalf("activity %d: pushed %d, want %d", a, sum, q)
		}
	}
}

// Certificates are rotated in place while the service runs: here Redis
// moves to a new CA, which also signs the client certificates it now asks
// for, and the files redis.tls_* name are rewritten with the new ones. The
// service's next connections read them, so reports go on without a
// restart; read once at start, every dial failed until one.
func TestRotatedTLSFilesNeedNoRestart(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	r := testredis.Start(t, testredis.Options{TLS: true})
	s := startService(t, options{redis: r, log: zap.New(core)})
	a := newActivity()
	s.report(gift(a, 1, "firework", 1))

	expiry := func() int64 { // the client certificate's, as /metrics tells it
		t.Helper()
		m := regexp.MustCompile(`(?m)^combo_redis_tls_client_certificate_expiry_timestamp_seconds (\S+)$`).FindStringSubmatch(scrape(t, s))
		if m == nil {
			t.Fatal("/metrics lacks combo_redis_tls_client_certificate_expiry_timestamp_seconds")
		}
		v, err := strconv.ParseFloat(m[1], 64)
		if err != nil {
			t.Fatal(err)
		}
		return int64(v)
	}
	if got, want := expiry(), leafExpiry(t, r.TLS.ClientCert); got != want {
		t.Fatalf("client certificate expiry %d, want %d", got, want)
	}
	if text := scrape(t, s); !strings.Contains(text, "\ncombo_redis_tls_files_read 1\n") {
		t.Fatal("/metrics lacks combo_redis_tls_files_read 1: the files read whole")
	}

	// A new CA over the files Redis and the service read; the new client
	// certificate lasts a day longer.
	renewed := time.Now().Add(48 * time.Hour)
	testredis.NewTLSFilesUntil(t, r.Dir, renewed)
	if got, want := expiry(), renewed.Unix(); got != want {
		t.Fatalf("client certificate expiry %d after renewal, want %d: a scrape reads the files", got, want)
	}
	r.Restart()
	s.report(gift(a, 2, "firework", 1)) // on a new connection, with the new files
	if code, body := readyz(t, s); code != http.StatusOK {
		t.Fatalf("/readyz after the rotation: %d %s", code, body)
	}
	if logs.FilterMessageSnippet("the redis.tls_* files changed").Len() == 0 {
		t.Fatalf("logs %v, want the change of files noted", logs.All())
	}
}

// leafExpiry is the unix second the first certificate in file expires.
func leafExpiry(t *testing.T, file string) int64 {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(raw)
	if block == nil {
		t.Fatalf("%s holds no PEM block", file)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert.NotAfter.Unix()
}

// A pooled TLS connection that Redis closed fails no report, whether Redis
// restarted (a bare end of stream) or closed it while running (CLIENT
// KILL, its idle timeout: a TLS alert waits before the end, which only
// the socket's TCP state tells apart from other TLS records): go-redis's
// check of an idle connection finds it closed (checkableTLSConn) and dials
// anew, as on plain TCP. Without it, each such connection failed one
// request with EOF.
func TestTLSConnectionsRedisClosedFailNoReport(t *testing.T) {
	for _, c := range []struct {
		name  string
		close func(r *testredis.Server)
	}{
		{"restart", func(r *testredis.Server) { r.Restart() }},
		{"CLIENT KILL", func(r *testredis.Server) {
			if runtime.GOOS != "linux" {
				t.Skip("only Linux tells a TLS alert before the end of the stream")
			}
			if err := r.Client().Do(context.Background(), "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes").Err(); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := testredis.Start(t, testredis.Options{TLS: true})
			s := startService(t, options{redis: r})
			a := newActivity()
			s.report(gift(a, 1, "firework", 1))
			if code, body := readyz(t, s); code != http.StatusOK {
				t.Fatalf("/readyz: %d %s", code, body)
			}
			c.close(r)
			s.report(gift(a, 2, "firework", 1)) // fails the test on any error
			if code, body := readyz(t, s); code != http.StatusOK {
				t.Fatalf("/readyz after Redis closed the connections: %d %s", code, body)
			}
		})
	}
}
