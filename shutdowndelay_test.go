package main

import (
	"context"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	comboclient "github.com/combo-service/combo-service/client"
	"github.com/combo-service/combo-service/conf"
	"github.com/combo-service/combo-service/kitex_gen/combo"
)

// With server.shutdown_delay, /readyz fails at the signal while the RPC
// port goes on taking reports for the delay: an orchestrator that removes
// a stopping replica from its endpoints only after signalling it
// (Kubernetes) has done so before the port closes. Without it, the port
// closed at the signal refused every caller still routed to the replica.
// The reports taken meanwhile are published like any other, and the
// service then stops cleanly.
func TestShutdownDelayServesWhileUnready(t *testing.T) {
	const delay = 1500 * time.Millisecond
	s := startService(t, options{mutate: func(c *conf.Config) { c.Server.ShutdownDelay = delay }})
	a := newActivity()
	s.cancel() // SIGTERM
	signalled := time.Now()
	if code, body := readyz(t, s); code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz at the signal: %d %q, want 503", code, body)
	}
	// A caller not yet told (a new connection, as through a Service's
	// address) is still served until the delay is nearly out.
	var taken int32
	for time.Since(signalled) < delay-500*time.Millisecond {
		c := gift(a, 1, "firework", 1)
		rpc := newRPC(t, s.addrs.RPCAddr)
		resp, err := rpc.ReportContribution(context.Background(), &combo.ReportContributionRequest{Contribution: c})
		if err != nil {
			t.Fatalf("report %v after the signal, inside server.shutdown_delay (%s): %v", time.Since(signalled).Round(time.Millisecond), delay, err)
		}
		if resp.Duplicate || resp.Degraded {
			t.Fatalf("report after the signal: %+v", resp)
		}
		taken++
		time.Sleep(100 * time.Millisecond)
	}
	// Then the port closes, and the service stops cleanly having
	// published every report it took.
	deadline := time.Now().Add(delay + 3*time.Second)
	for {
		conn, err := net.DialTimeout("tcp", s.addrs.RPCAddr, 200*time.Millisecond)
		if err != nil {
			break
		}
		conn.Close()
		if time.Now().After(deadline) {
			t.Fatalf("RPC port still open %v after the signal (server.shutdown_delay %s)", time.Since(signalled).Round(time.Millisecond), delay)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if closed := time.Since(signalled); closed < delay {
		t.Fatalf("RPC port closed %v after the signal, before server.shutdown_delay (%s)", closed.Round(time.Millisecond), delay)
	}
	if err := s.stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	pushed := func(got []received) bool {
		var q int32
		for _, p := range got {
			q += p.msg.Record.Quantity
		}
		return q == taken
	}
	s.pushes.until(wait, pushed, forActivity(a)) // the reports taken during the delay, each once
	s.pushes.quiet(testWindow+testGrace, len(s.pushes.matching(forActivity(a))), forActivity(a))
}

// A client.NewClient holding pooled TTHeader connections to a stopping
// replica goes on using them through server.shutdown_delay: Kitex marks
// answers for reset only from its Shutdown on, after the delay.
// (TestShutdownDelayServesWhileUnready dials a new client per call.)
func TestShutdownDelayKeepsPooledConnections(t *testing.T) {
	const delay = 1500 * time.Millisecond
	s := startService(t, options{mutate: func(c *conf.Config) { c.Server.ShutdownDelay = delay }})
	cli, err := comboclient.NewClient([]string{s.addrs.RPCAddr})
	if err != nil {
		t.Fatal(err)
	}
	act := newActivity()
	call := func() error {
		_, err := cli.ReportContribution(context.Background(), &combo.ReportContributionRequest{Contribution: gift(act, 1, "firework", 1)})
		return err
	}
	for range 20 { // warm the pool
		if err := call(); err != nil {
			t.Fatal(err)
		}
	}
	s.cancel()
	signalled := time.Now()
	var wg sync.WaitGroup
	var ok, failed atomic.Int32
	for range 8 {
		wg.Go(func() {
			for time.Since(signalled) < delay-300*time.Millisecond {
				if err := call(); err != nil {
					failed.Add(1)
					t.Errorf("pooled call %v after the signal, inside the delay: %v", time.Since(signalled).Round(time.Millisecond), err)
				} else {
					ok.Add(1)
				}
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
	wg.Wait()
	t.Logf("inside the delay: %d ok, %d failed", ok.Load(), failed.Load())
}

// afterDelay's context ends the delay after its parent, and its cancel
// ends it at once, before or during the delay.
func TestAfterDelay(t *testing.T) {
	log := zap.NewNop()
	parent, stop := context.WithCancel(context.Background())
	if ctx, cancel := afterDelay(parent, 0, log); ctx != parent {
		t.Fatal("a delay of 0 must give the parent itself")
	} else {
		cancel()
	}
	ctx, cancel := afterDelay(parent, 200*time.Millisecond, log)
	defer cancel()
	// Read the clock before stop: the delay's timer may start on the
	// other CPU before this goroutine reads it after.
	stopped := time.Now()
	stop()
	select {
	case <-ctx.Done():
		t.Fatal("ended with its parent, not the delay after")
	case <-time.After(100 * time.Millisecond):
	}
	<-ctx.Done()
	if d := time.Since(stopped); d < 200*time.Millisecond {
		t.Fatalf("ended %v after its parent, want 200ms", d)
	}

	for _, during := range []bool{false, true} {
		parent, stop := context.WithCancel(context.Background())
		ctx, cancel := afterDelay(parent, time.Hour, log)
		if during {
			stop()
		}
		cancel()
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
			t.Fatalf("cancel (parent ended: %v) did not end it", during)
		}
		stop()
	}
}
