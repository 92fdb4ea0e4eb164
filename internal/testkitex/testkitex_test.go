package testkitex

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/cloudwego/kitex/client"

	"github.com/combo-service/combo-service/internal/testwait"
	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/kitex_gen/combo/comboservice"
)

// refusing is a ComboService that answers every call with an error.
type refusing struct{}

var errRefused = errors.New("refused")

func (refusing) ReportContribution(context.Context, *combo.ReportContributionRequest) (*combo.ReportContributionResponse, error) {
	return nil, errRefused
}

func (refusing) ReportContributions(context.Context, *combo.ReportContributionsRequest) (*combo.ReportContributionsResponse, error) {
	return nil, errRefused
}

func (refusing) MergeLatest(context.Context, *combo.MergeLatestRequest) (*combo.MergeLatestResponse, error) {
	return nil, errRefused
}

// Serve's server listens until its test ends, and no longer.
func TestServeStopsWhenItsTestEnds(t *testing.T) {
	var addr string
	t.Run("serve", func(t *testing.T) {
		addr = Serve(t, &refusing{})
		// A call answered: Run serves (a Stop before Run has set up its
		// server does nothing, and Run then serves for good).
		cli, err := comboservice.NewClient("combo", client.WithHostPorts(addr), client.WithRPCTimeout(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cli.MergeLatest(context.Background(), &combo.MergeLatestRequest{}); err == nil || !strings.Contains(err.Error(), errRefused.Error()) {
			t.Fatalf("a call to the server: %v, want its answer %q", err, errRefused)
		}
	})
	if c, err := net.DialTimeout("tcp", addr, 2*time.Second); err == nil {
		_ = c.Close()
		t.Fatal("the server still listens after its test ended")
	}
}

// A test that ends before its first call (a skip, an early failure) stops
// its server too: a Stop that came before Run had set up its server did
// nothing, Run then served for good, and the cleanup failed the test
// after 10 s.
func TestServeStopsWhenItsTestEndsAtOnce(t *testing.T) {
	for range 5 {
		var addr string
		start := time.Now()
		t.Run("serve", func(t *testing.T) { addr = Serve(t, &refusing{}) })
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("the server of a test that made no call took %s to stop", d)
		}
		if c, err := net.DialTimeout("tcp", addr, 2*time.Second); err == nil {
			_ = c.Close()
			t.Fatal("the server still listens after its test ended")
		}
	}
}

// fatalTB records Fatalf and ends the goroutine that called it, as
// testing's does, without failing the test.
type fatalTB struct {
	testing.TB
	fatal string
}

func (f *fatalTB) Helper() {}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.fatal = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// awaitServingOf runs awaitServing on addr with a wait of 300 ms and
// returns what it failed t with, "" if it returned.
func awaitServingOf(t *testing.T, addr string, ran <-chan error) string {
	f := &fatalTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		awaitServing(f, addr, ran, 300*time.Millisecond)
	}()
	testwait.Receive(t, "awaitServing to return or fail", done)
	return f.fatal
}

// Serve fails its test, saying why, when the server does not come to
// serve: its listener never accepts, or Run returned. (The timeout's
// check once read the dial's error, not the read's: Serve then returned
// as if the server served, and the cleanup's Stop was the one lost.)
func TestAwaitServingFailsWhenTheServerDoesNotServe(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0") // never accepts
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if got := awaitServingOf(t, ln.Addr().String(), make(chan error)); !strings.Contains(got, "did not close a connection") {
		t.Errorf("awaitServing of a listener that never accepts: failed with %q, want a timeout", got)
	}
	ran := make(chan error, 1)
	ran <- errors.New("no service")
	if got := awaitServingOf(t, ln.Addr().String(), ran); !strings.Contains(got, "Run returned no service") {
		t.Errorf("awaitServing of a server whose Run returned: failed with %q, want Run's error", got)
	}
}
