// Package testkitex serves a ComboService over Kitex in tests, for code
// that calls the service (the client, the demo) and needs a real server
// on the other end of the wire rather than a fake client.
package testkitex

import (
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
// instead of hanging it.
func Serve(t testing.TB, svc combo.ComboService) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	svr := comboservice.NewServer(svc, server.WithListener(ln), server.WithExitWaitTime(time.Second))
	ran := make(chan error, 1)
	go func() { ran <- svr.Run() }()
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
