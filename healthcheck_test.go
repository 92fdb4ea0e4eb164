package main

import (
	"net"
	"net/http"
	"net/http/httptest"
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
