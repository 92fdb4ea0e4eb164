package main

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/combo-service/combo-service/client"
	"github.com/combo-service/combo-service/internal/rpcserver"
	"github.com/combo-service/combo-service/internal/testwait"
	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/kitex_gen/combo/comboservice"
)

// combo-floor as bench.sh runs it: a process, started with -addr, stopped
// with SIGTERM. No test ran main before: one that exited 0 when it could
// not listen (the port taken, by a floor left over from an earlier run),
// or died on SIGTERM instead of stopping, passed.

// asMain runs main, in a child floorProcess started, with its arguments.
func asMain() bool {
	args, ok := os.LookupEnv("COMBO_FLOOR_TEST_MAIN")
	if ok {
		os.Args = append([]string{"combo-floor"}, strings.Fields(args)...)
		main()
	}
	return ok
}

// floorProcess runs this test binary's test named test as combo-floor
// with args; it returns the child's output so far and its exit.
func floorProcess(t *testing.T, test string, args ...string) (*exec.Cmd, *syncBuffer, <-chan error) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.timeout=1m")
	cmd.Env = append(os.Environ(), "COMBO_FLOOR_TEST_MAIN="+strings.Join(args, " "))
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { cmd.Process.Kill() })
	return cmd, out, done
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// It exits 1 saying why when its address is taken.
func TestFloorExits1WhenItCannotListen(t *testing.T) {
	if asMain() {
		return
	}
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	_, out, done := floorProcess(t, "TestFloorExits1WhenItCannotListen", "-addr", taken.Addr().String())
	err = testwait.Receive(t, "combo-floor to exit", done)
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(out.String(), "combo-floor: listen "+taken.Addr().String()) {
		t.Fatalf("combo-floor on a taken address: %v, output %q; want exit 1 saying it cannot listen", err, out)
	}
}

// It says where it listens (-addr 127.0.0.1:0 picks a free port), answers
// there, and on SIGTERM stops and exits 0.
func TestFloorAnswersUntilSIGTERMThenExits0(t *testing.T) {
	if asMain() {
		return
	}
	cmd, out, done := floorProcess(t, "TestFloorAnswersUntilSIGTERMThenExits0", "-addr", "127.0.0.1:0")
	var addr string
	testwait.For(t, "combo-floor to say where it listens", func() bool {
		_, rest, ok := strings.Cut(out.String(), "combo-floor: listening on ")
		addr, _, ok = strings.Cut(rest, "\n")
		return ok
	})
	cli, err := client.NewClient([]string{addr})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := cli.ReportContribution(ctx, &combo.ReportContributionRequest{Contribution: &combo.Contribution{Id: 9, Quantity: 2}})
	if err != nil || resp.WindowId != 9 || resp.WindowQuantity != 2 {
		t.Fatalf("ReportContribution to combo-floor at %s: %+v, %v", addr, resp, err)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := testwait.Receive(t, "combo-floor to exit after SIGTERM", done); err != nil {
		t.Fatalf("combo-floor after SIGTERM: %v, want exit 0; output %q", err, out)
	}
}

// The floor measures the service's RPC layer, so it is that layer: its
// connection bound (combo-bench -c 32 holds 32 connections: a bound of 1
// refused all but one, measuring refusals), its request guard (a batch
// past rpcserver.MaxContainerItems is refused before it is decoded, as
// the service refuses it: a floor without the service's options decoded
// and answered it, measuring less work than the service's layer does).
func TestFloorServesWithTheServicesRPCLayer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serve(ctx, ln) }()
	defer func() {
		cancel()
		if err := testwait.Receive(t, "serve to return", done); err != nil {
			t.Errorf("serve: %v", err)
		}
	}()
	call, stop := context.WithTimeout(context.Background(), 5*time.Second)
	defer stop()
	var clis []comboservice.Client
	for i := range 2 { // each its own connection, held in its pool
		cli, err := client.NewClient([]string{ln.Addr().String()})
		if err != nil {
			t.Fatal(err)
		}
		clis = append(clis, cli)
		if resp, err := cli.ReportContribution(call, &combo.ReportContributionRequest{
			Contribution: &combo.Contribution{Id: int64(i + 1), Quantity: 1}}); err != nil || resp.WindowId != int64(i+1) {
			t.Fatalf("caller %d: %+v, %v", i, resp, err)
		}
	}
	big := make([]*combo.Contribution, rpcserver.MaxContainerItems+1)
	for i := range big {
		big[i] = &combo.Contribution{Id: int64(i + 1)}
	}
	if resp, err := clis[1].ReportContributions(call, &combo.ReportContributionsRequest{Contributions: big}); err == nil {
		t.Fatalf("a batch of %d answered (%d results), want it refused by the service's request guard", len(big), len(resp.Results))
	}
}
