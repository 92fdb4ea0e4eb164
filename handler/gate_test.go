package handler

import (
	"context"
	"errors"
	"testing"
	"time"
)

// drain closes the gate at once and returns only when the calls admitted
// before have left.
func TestGateDrainWaitsForAdmittedCalls(t *testing.T) {
	var g gate
	if !g.enter() {
		t.Fatal("an open gate refused a call")
	}
	drained := make(chan error, 1)
	go func() { drained <- g.drain(context.Background()) }()
	waitFor(t, "the gate to close", g.closed.Load)
	if g.enter() {
		t.Fatal("a draining gate admitted a call")
	}
	select {
	case err := <-drained:
		t.Fatalf("drain returned (%v) while a call was in flight", err)
	case <-time.After(20 * time.Millisecond):
	}
	g.leave()
	select {
	case err := <-drained:
		if err != nil {
			t.Fatalf("drain: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("drain did not return after the last call left")
	}
}

// drain gives up when its ctx ends, whatever is still in flight.
func TestGateDrainBoundedByCtx(t *testing.T) {
	var g gate
	g.enter()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := g.drain(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("drain with a call stuck in flight: %v, want the ctx's deadline", err)
	}
}
