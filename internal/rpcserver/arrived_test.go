package rpcserver

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudwego/kitex/pkg/remote"
)

// arrivingBuffer holds nothing until at, then n bytes, counting how often
// it is asked.
type arrivingBuffer struct {
	remote.ByteBuffer
	at    time.Time
	n     int
	polls atomic.Int64
}

func (b *arrivingBuffer) ReadableLen() int {
	b.polls.Add(1)
	if time.Now().After(b.at) {
		return b.n
	}
	return 0
}

// A large request's bytes are seen within about a poll (at most 100 ms)
// of their arrival, with few polls: polled every 5 ms, 4000 connections
// sending a header alone cost a core. One that never arrives is let go at
// the timeout.
func TestArrivedPollsBackingOffTo100ms(t *testing.T) {
	b := &arrivingBuffer{at: time.Now().Add(1100 * time.Millisecond), n: LargeRequestBytes}
	if !arrived(b, LargeRequestBytes, 5*time.Second) {
		t.Fatal("bytes that arrived were not seen")
	}
	if late := time.Since(b.at); late > 500*time.Millisecond {
		t.Errorf("bytes seen %v after they arrived, want within about 100 ms", late)
	}
	if p := b.polls.Load(); p > 40 {
		t.Errorf("%d polls in 1.1 s, want about 20 (1 ms doubling to 100 ms)", p)
	}
	b = &arrivingBuffer{at: time.Now().Add(time.Hour), n: LargeRequestBytes}
	start := time.Now()
	if arrived(b, LargeRequestBytes, time.Second) {
		t.Fatal("bytes that never arrived were seen")
	}
	if d := time.Since(start); d < time.Second || d > 3*time.Second {
		t.Errorf("let go after %v, want about the 1 s timeout", d)
	}
}
