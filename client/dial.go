package client

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"time"
)

// spreadDialer is the Kitex dialer of NewClient. netpoll's own dialer
// looks a host name up and tries its addresses in the order DNS gives
// them, the first with the whole connect timeout: a name with several A
// records (a headless Kubernetes service, docker compose replicas) had
// every connection dialed to its first record, and when that one dropped
// packets every dial timed out though another replica was up. This one
// looks the name up at each dial (so a name that does not resolve yet
// works once it does), tries its addresses in random order, and gives
// each a share of the connect timeout left. An IP literal, or any other
// network than TCP, is dialed as it is.
//
// Kitex gives it the instance's network, "tcp" for every NewClient
// address, and the connect timeout (DefaultClientConnectTimeout unless the
// caller sets one). Each address is dialed by dialOne: it must return a
// netpoll connection, which Kitex's netpoll transport needs
// (dial_netpoll.go), but on Windows, where netpoll has no dialer and
// Kitex uses its gonet transport, a net.Conn of Go's own (dial_windows.go).
type spreadDialer struct{}

// DialTimeout implements Kitex's remote.Dialer.
func (spreadDialer) DialTimeout(network, address string, timeout time.Duration) (net.Conn, error) {
	host, port, err := net.SplitHostPort(address)
	var want func(net.IP) bool
	switch network {
	case "tcp":
		want = func(net.IP) bool { return true }
	case "tcp4":
		want = func(ip net.IP) bool { return ip.To4() != nil }
	case "tcp6":
		want = func(ip net.IP) bool { return ip.To4() == nil }
	}
	if err != nil || want == nil || host == "" || isIPLiteral(host) {
		return dialOne(network, address, timeout)
	}

	ctx := context.Background()
	var deadline time.Time
	if timeout > 0 { // netpoll takes no timeout as none
		deadline = time.Now().Add(timeout)
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	// netpoll's dialer looks names up with net.DefaultResolver too.
	found, err := net.DefaultResolver.LookupIPAddr(ctx, host)
	if err != nil {
		return nil, fmt.Errorf("dial %s %s: %w", network, address, err)
	}
	addrs := found[:0]
	for _, a := range found {
		if want(a.IP) {
			addrs = append(addrs, a)
		}
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("dial %s %s: %w", network, address, &net.AddrError{Err: "no suitable address found", Addr: host})
	}
	rand.Shuffle(len(addrs), func(i, j int) { addrs[i], addrs[j] = addrs[j], addrs[i] })

	var first error // the first address's error, as net.Dialer reports
	tried := 0
	for i, a := range addrs {
		share := time.Duration(0)
		if timeout > 0 {
			left := time.Until(deadline)
			if left <= 0 {
				break
			}
			// An equal share of what is left, as net.Dialer gives. But
			// net.Dialer gives each at least 2 s, all of a 200 ms
			// timeout for the first address; a quarter of the timeout
			// instead, so that a long list of records does not cut each
			// attempt too short for a replica that is up.
			share = max(left/time.Duration(len(addrs)-i), min(left, timeout/4))
		}
		ip := a.IP.String()
		if a.Zone != "" {
			ip += "%" + a.Zone
		}
		tried++
		c, err := dialOne(network, net.JoinHostPort(ip, port), share)
		if err == nil {
			return c, nil
		}
		if first == nil {
			first = err
		}
	}
	if first == nil {
		first = fmt.Errorf("connect timeout %s spent looking the name up: %w", timeout, os.ErrDeadlineExceeded)
	}
	return nil, fmt.Errorf("dial %s %s: %d of %d addresses tried: %w", network, address, tried, len(addrs), first)
}

// isIPLiteral reports whether host is an IP address, IPv6 zone included.
func isIPLiteral(host string) bool {
	_, err := netip.ParseAddr(host)
	return err == nil
}
