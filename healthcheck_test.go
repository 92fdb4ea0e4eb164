package main

import (
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// A metrics.addr whose port is a service name is one the service listens
// on (net.Listen resolves it), so the probe must find it too: it built
// "http://127.0.0.1:http/healthz", which no URL parser takes.
func TestHealthcheckResolvesAServiceNamePort(t *testing.T) {
	port, err := net.LookupPort("tcp", "http")
	if err != nil {
		t.Skipf("no services database here: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		t.Skipf("cannot listen on port %d: %v", port, err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			http.NotFound(w, r)
		}
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	if err := healthcheck("127.0.0.1:http", "/healthz", 5*time.Second); err != nil {
		t.Fatalf("healthcheck of metrics.addr 127.0.0.1:http (port %d): %v", port, err)
	}
}

func TestHealthcheckRefusesAnAddressWithNoFixedPort(t *testing.T) {
	for _, addr := range []string{"", ":0", "127.0.0.1:", "127.0.0.1:no-such-service-name", "no-port"} {
		err := healthcheck(addr, "/healthz", time.Second)
		if err == nil || !strings.Contains(err.Error(), "has no fixed port to probe") {
			t.Errorf("healthcheck(%q) = %v, want it to say metrics.addr has no fixed port to probe", addr, err)
		}
	}
}

// "-healthcheck readyz", without the slash, probes /readyz: it built
// "http://127.0.0.1:29102readyz" and failed with "invalid port". A URL is
// refused naming the flag.
func TestHealthcheckTakesAPathWithoutItsSlash(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	paths := make(chan string, 4)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		paths <- r.URL.Path
		if r.URL.Path != "/readyz" {
			http.NotFound(w, r)
		}
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	for _, path := range []string{"readyz", "/readyz"} {
		if err := healthcheck(ln.Addr().String(), path, 5*time.Second); err != nil {
			t.Errorf("healthcheck %q: %v", path, err)
		} else if got := <-paths; got != "/readyz" {
			t.Errorf("healthcheck %q asked for %q", path, got)
		}
	}
	err = healthcheck(ln.Addr().String(), "http://"+ln.Addr().String()+"/readyz", 5*time.Second)
	if err == nil || !strings.Contains(err.Error(), "-healthcheck takes a path") {
		t.Errorf("healthcheck of a URL: %v, want it refused naming -healthcheck", err)
	}
}

// -healthcheck /readyz must fail while the service answers 503 (draining,
// Redis down): the container HEALTHCHECK reads only the exit status.
func TestHealthcheckFailsOnA503(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "stopping", http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	if err := healthcheck(strings.TrimPrefix(srv.URL, "http://"), "/readyz", 5*time.Second); err == nil {
		t.Fatal("healthcheck of a 503 succeeded")
	}
}

// Only a 2xx is healthy: a 404 (a mistyped -healthcheck path) is not, or
// the probe would pass whatever the service says.
func TestHealthcheckFailsOnA404(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	if err := healthcheck(strings.TrimPrefix(srv.URL, "http://"), "/healthx", 5*time.Second); err == nil {
		t.Fatal("healthcheck of a 404 succeeded")
	}
}

// The probe's timeout bounds a server that never answers: the container
// HEALTHCHECK would otherwise hang to its own timeout.
func TestHealthcheckTimesOut(t *testing.T) {
	hang := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-hang }))
	defer srv.Close()
	defer close(hang) // before Close, which waits for the handler
	done := make(chan error, 1)
	go func() { done <- healthcheck(strings.TrimPrefix(srv.URL, "http://"), "/healthz", 200*time.Millisecond) }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("healthcheck of a hung server succeeded")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("healthcheck of a hung server did not return within 10 s (timeout 200 ms)")
	}
}

// The probe goes straight to metrics.addr, never through HTTP_PROXY
// (a container's environment may set one for the caller's traffic).
// net/http reads the proxy variables once per process, so the probe runs
// in a child process of this test binary with HTTP_PROXY set, against a
// listener on a non-loopback address (loopback is never proxied).
func TestHealthcheckIgnoresHTTPProxy(t *testing.T) {
	if target := os.Getenv("COMBO_TEST_HEALTHCHECK_TARGET"); target != "" {
		if err := healthcheck(target, "/healthz", 5*time.Second); err != nil {
			t.Fatalf("healthcheck of %s with HTTP_PROXY=%s: %v", target, os.Getenv("HTTP_PROXY"), err)
		}
		return
	}
	var host string
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if ip, ok := a.(*net.IPNet); ok && ip.IP.To4() != nil && !ip.IP.IsLoopback() {
			host = ip.IP.String()
			break
		}
	}
	if host == "" {
		t.Skip("no non-loopback IPv4 address")
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Skipf("listen on %s: %v", host, err)
	}
	target := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	target.Listener.Close()
	target.Listener = ln
	target.Start()
	defer target.Close()
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "via the proxy", http.StatusBadGateway)
	}))
	defer proxy.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHealthcheckIgnoresHTTPProxy$", "-test.count=1", "-test.timeout=1m", "-test.v")
	cmd.Env = append(os.Environ(), "COMBO_TEST_HEALTHCHECK_TARGET="+ln.Addr().String(), "HTTP_PROXY="+proxy.URL,
		"http_proxy="+proxy.URL, "NO_PROXY=", "no_proxy=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	// A child that ran no test (a -test.run pattern the test's name no
	// longer matches) or skipped exits 0 too, having probed nothing.
	if !strings.Contains(string(out), "--- PASS: TestHealthcheckIgnoresHTTPProxy") {
		t.Fatalf("child did not pass the test (skipped, or ran none):\n%s", out)
	}
}

// A link-local metrics.addr carries its zone ([fe80::1%eth0]:9100), which
// conf takes and the service listens on: the probe wrote the zone's '%'
// into the URL unescaped and failed ("invalid URL escape") whatever the
// service said, so the container was never healthy.
func TestHealthcheckProbesAnAddressWithAZone(t *testing.T) {
	zone := ""
	if ifs, err := net.Interfaces(); err == nil {
		for _, i := range ifs {
			if i.Flags&net.FlagLoopback != 0 {
				zone = i.Name
			}
		}
	}
	ln, err := net.Listen("tcp", "[::1%"+zone+"]:0")
	if zone == "" || err != nil {
		t.Skipf("no IPv6 loopback with a zone here (%q, %v)", zone, err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/readyz" && r.URL.RawQuery == "",
			r.URL.Path == "/verbose" && r.URL.RawQuery == "level=1",
			r.RequestURI == "/a%2Fb":
			w.Write([]byte("ok"))
		default:
			http.NotFound(w, r)
		}
	}))
	srv.Listener = ln
	srv.Start()
	defer srv.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	if err := healthcheck("[::1%"+zone+"]:"+port, "/readyz", 5*time.Second); err != nil {
		t.Fatalf("healthcheck of [::1%%%s]:%s: %v, want it healthy", zone, port, err)
	}
	// A query stays a query, as it was when the URL was a string.
	if err := healthcheck("[::1%"+zone+"]:"+port, "/verbose?level=1", 5*time.Second); err != nil {
		t.Fatalf("healthcheck of /verbose?level=1: %v, want it healthy", err)
	}
	// A path's own escapes go as written, not escaped again.
	if err := healthcheck("[::1%"+zone+"]:"+port, "/a%2Fb", 5*time.Second); err != nil {
		t.Fatalf("healthcheck of /a%%2Fb: %v, want it healthy", err)
	}
}
