// Package testkitex serves a ComboService over Kitex in tests, for code
// that calls the service (the client, the demo) and needs a real server
// on the other end of the wire rather than a fake client.
package testkitex

import (
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"github.com/cloudwego/kitex/server"

	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/kitex_gen/combo/comboservice"
)

// Serve serves svc on 127.0.0.1 at a free port until the test ends and
// returns its address. The cleanup stops the server, waiting at most 10 s
// for Run to return (Kitex waits up to its exit wait time, 1 s here, for
// the calls under way), so a server that never stops fails the test
// instead of hanging it. Serve returns once the server serves, so that
// the stop of a test that ends before its first call is not lost.
func Serve(t testing.TB, svc combo.ComboService) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	svr := comboservice.NewServer(svc, server.WithListener(ln), server.WithExitWaitTime(time.Second))
	ran := make(chan error, 1)
	go func() { ran <- svr.Run() }()
	awaitServing(t, ln.Addr().String(), ran, 10*time.Second)
	t.Cleanup(func() {
		if err := svr.Stop(); err != nil {
			t.Errorf("server Stop: %v", err)
		}
		select {
		case <-ran:
		case <-time.After(10 * time.Second):
			t.Error("server Run did not return within 10 s of Stop")
		}
	})
	return ln.Addr().String()
}

// awaitServing returns once the server at addr serves: it accepts a
// connection and closes it when the connection's writes end with no RPC
// sent (netpoll closes a connection whose peer half-closed it, without a
// line; bytes that are no RPC would log an error at every Serve). Until
// then the kernel queues connections on the listener, and a Stop (of a
// test that ends before its first call) could come before Run had set up
// its server: Kitex v0.16.3's Stop then does nothing, once and for all,
// and Run serves on for good. It fails t if Run returns first, or if the
// server neither closes the connection nor answers on it within wait.
func awaitServing(t testing.TB, addr string, ran <-chan error, wait time.Duration) {
	t.Helper()
	probed := make(chan error, 1)
	go func() { probed <- probe(addr, wait) }()
	select {
	case err := <-probed:
		if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("testkitex.Serve: the server at %s did not close a connection that sent no RPC in %s", addr, wait)
		} else if err != nil {
			t.Fatalf("testkitex.Serve: %v", err)
		}
	case err := <-ran:
		t.Fatalf("testkitex.Serve: server Run returned %v before it served", err)
	}
}

// probe dials addr, ends its writes and reads: anything but a timeout (a
// byte, the server's close, a reset) shows the server accepted it.
func probe(addr string, wait time.Duration) error {
	c, err := net.DialTimeout("tcp", addr, wait)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(wait))
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		return err
	}
	if _, err := c.Read(make([]byte, 1)); errors.Is(err, os.ErrDeadlineExceeded) {
		return err
	}
	return nil
}
