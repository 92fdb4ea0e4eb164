package main

import (
	"context"
	"time"
)

// ticking runs one goroutine that calls once each interval until stop:
// the loop of main's background watches (shardNodeWatch, nodeWatch),
// which differ only in what once does.
type ticking struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// startTicking calls once every interval, first after one interval, with a
// context that stop ends.
func startTicking(every time.Duration, once func(context.Context)) *ticking {
	ctx, cancel := context.WithCancel(context.Background())
	t := &ticking{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(t.done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				// A tick that came while the last call ran is still
				// waiting when stop cancels, and select picks between
				// ready cases at random: no call once stopped.
				if ctx.Err() != nil {
					return
				}
				once(ctx)
			}
		}
	}()
	return t
}

// stop ends the loop, cutting a call of once short, and waits for it.
func (t *ticking) stop() {
	t.cancel()
	<-t.done
}
