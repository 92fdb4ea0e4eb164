package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// healthcheck GETs path on this configuration's metrics.addr and returns
// nil on a 2xx answer. It serves the container HEALTHCHECK
// (`combo-service -healthcheck /healthz`): the image is distroless, with no
// curl or wget, and the probe reads the same config file and environment as
// the service, so it always checks the port the service really uses.
func healthcheck(metricsAddr, path string, timeout time.Duration) error {
	host, port, err := net.SplitHostPort(metricsAddr)
	if err == nil && port != "" {
		// A service name (":http") is a port net.Listen takes, and conf
		// lets it through; a URL needs the number.
		var n int
		if n, err = net.LookupPort("tcp", port); err == nil {
			port = strconv.Itoa(n)
		}
	}
	if err != nil || port == "" || port == "0" {
		return fmt.Errorf("metrics.addr %q has no fixed port to probe", metricsAddr)
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	// A path written without its slash ("-healthcheck readyz") is taken
	// as meant: it made "http://127.0.0.1:9100readyz", refused as an
	// invalid port. A URL is not a path: the probe's host is metrics.addr.
	if !strings.HasPrefix(path, "/") {
		if strings.Contains(path, "://") {
			return fmt.Errorf("-healthcheck takes a path such as /readyz (the host is metrics.addr's), got %q", path)
		}
		path = "/" + path
	}
	// A link-local metrics.addr's zone ([fe80::1%eth0]) is written %25 in
	// a URL: a bare '%' failed "invalid URL escape". The path goes as
	// written, its own escapes (/a%2Fb) not escaped again.
	target := "http://" + strings.Replace(net.JoinHostPort(host, port), "%", "%25", 1) + path
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return err
	}
	// No proxy: this probes the process's own port, and
	// http.DefaultClient would send it through HTTP_PROXY for any
	// metrics.addr host that is not loopback.
	resp, err := (&http.Client{Transport: &http.Transport{Proxy: nil}}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("GET %s: %s: %s", target, resp.Status, body)
	}
	return nil
}
