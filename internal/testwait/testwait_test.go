package testwait

import (
	"sync/atomic"
	"testing"
	"time"
)

func TestForReturnsOnceCondHolds(t *testing.T) {
	var done atomic.Bool
	time.AfterFunc(20*time.Millisecond, func() { done.Store(true) })
	For(t, "the timer", done.Load)
	if !done.Load() {
		t.Fatal("returned before the condition held")
	}
}

func TestReceiveReturnsTheValueSent(t *testing.T) {
	ch := make(chan int)
	time.AfterFunc(20*time.Millisecond, func() { ch <- 7 })
	if got := Receive(t, "the timer's value", ch); got != 7 {
		t.Fatalf("received %d, want 7", got)
	}
}

func TestSendWaitsForRoom(t *testing.T) {
	ch := make(chan int, 1)
	ch <- 1
	time.AfterFunc(20*time.Millisecond, func() { <-ch })
	Send(t, "the second value", ch, 2)
	if got := <-ch; got != 2 {
		t.Fatalf("received %d, want 2", got)
	}
}
