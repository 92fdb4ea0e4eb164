// Package testkitex serves a ComboService over Kitex in tests, for code
// that calls the service (the client, the demo) and needs a real server
// on the other end of the wire rather than a fake client.
package testkitex

import (
	"errors"
	"io"
	"net"
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
	awaitServing(t, ln.Addr().String(), ran)
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

// awaitServing returns once the server at addr serves: it closes a
// connection that sent it no RPC. Until then the kernel queues
// connections on the listener, and a Stop (of a test that ends before
// its first call) could come before Run had set up its server: Kitex
// v0.16.3's Stop then does nothing, once and for all, and Run serves on
// for good.
func awaitServing(t testing.TB, addr string, ran <-chan error) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatalf("testkitex.Serve: %v", err)
	}
	defer c.Close()
	_ = c.SetDeadline(deadline)
	if _, err := c.Write([]byte("no RPC\r\n\r\n")); err == nil {
		_, err = io.Copy(io.Discard, c) // until the server closes it
	}
	if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() {
		select {
		case err := <-ran:
			t.Fatalf("testkitex.Serve: server Run returned %v", err)
		default:
			t.Fatalf("testkitex.Serve: the server at %s did not close a connection that sent no RPC in 10 s", addr)
		}
	}
}
