package testwait

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
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

// fatalTB records Fatalf and ends the goroutine that called it, as
// testing's does, without failing the test.
type fatalTB struct {
	testing.TB
	fatal atomic.Pointer[string]
}

func (f *fatalTB) Helper() {}

func (f *fatalTB) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	f.fatal.Store(&msg)
	runtime.Goexit()
}

// A wait that times out fails its test, saying what it waited for: it
// never returns as if what it waited for had come. The three waits run
// at once, so the test takes one Deadline.
func TestWaitsFailAtTheirDeadline(t *testing.T) {
	never := make(chan int)
	full := make(chan int, 1)
	full <- 1
	waits := map[string]func(testing.TB){
		"For":     func(tb testing.TB) { For(tb, "a cond never true", func() bool { return false }) },
		"Receive": func(tb testing.TB) { Receive(tb, "a value never sent", never) },
		"Send":    func(tb testing.TB) { Send(tb, "a value for a full channel", full, 2) },
	}
	start := time.Now()
	var wg sync.WaitGroup
	fatals := map[string]*fatalTB{}
	returned := map[string]*atomic.Bool{}
	for name, wait := range waits {
		f := &fatalTB{TB: t}
		fatals[name], returned[name] = f, new(atomic.Bool)
		wg.Go(func() {
			wait(f)
			returned[name].Store(true) // not reached after Fatalf
		})
	}
	wg.Wait()
	for name, f := range fatals {
		msg := f.fatal.Load()
		if returned[name].Load() || msg == nil {
			t.Errorf("%s returned at its deadline instead of failing the test", name)
		} else if !strings.Contains(*msg, "a ") {
			t.Errorf("%s failed with %q, which does not say what it waited for", name, *msg)
		}
	}
	if d := time.Since(start); d < Deadline {
		t.Errorf("the waits failed after %s, before their deadline %s", d, Deadline)
	}
	if len(full) != 1 || <-full != 1 {
		t.Error("Send put its value on a channel that had no room")
	}
}
