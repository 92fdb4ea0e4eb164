package main

import (
	"context"
	"testing"
	"time"
)

// A loop's first call comes after one interval, not at its start: the
// start checks have just read what the watches would read (mutant: once
// called at once).
func TestTickingFirstCallsAfterAnInterval(t *testing.T) {
	called := make(chan struct{}, 1)
	tk := startTicking(time.Hour, func(context.Context) {
		select {
		case called <- struct{}{}:
		default:
		}
	})
	defer tk.stop()
	select {
	case <-called:
		t.Fatal("once called before one interval passed")
	case <-time.After(200 * time.Millisecond):
	}
}
