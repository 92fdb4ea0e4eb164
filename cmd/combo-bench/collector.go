package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/combo-service/combo-service/push"
)

// collector watches every activity channel (PSUBSCRIBE act:*:contributions)
// and keeps the pushes of the activities it was told to track. The receive
// time is taken the moment go-redis hands the message over, before decoding,
// so decoding cost never inflates the measured lag.
type collector struct {
	ps     *redis.PubSub
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex
	tracked map[int64][]pushed
	// checked holds the activities whose pushes were taken for a check;
	// a push for one of them arrived too late for its check (a window
	// pushed again later, as by a claimer) and is kept in late.
	checked   map[int64]bool
	late      map[int64][]pushed // by activity
	badPushes int                // undecodable payloads, or pushes on another activity's channel
	recvErrs  int
	lastErr   error
}

func startCollector(ctx context.Context, rdb *redis.Client) (*collector, error) {
	ps := rdb.PSubscribe(ctx, push.ChannelPattern)
	// Wait for the subscription to be confirmed: a push published before it
	// would be lost and counted as a missing window.
	if _, err := ps.Receive(ctx); err != nil {
		_ = ps.Close()
		return nil, fmt.Errorf("psubscribe %s: %w", push.ChannelPattern, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &collector{ps: ps, cancel: cancel, done: make(chan struct{}), tracked: make(map[int64][]pushed), checked: make(map[int64]bool), late: make(map[int64][]pushed)}
	go c.loop(ctx)
	return c, nil
}

func (c *collector) loop(ctx context.Context) {
	defer close(c.done)
	for {
		msg, err := c.ps.ReceiveMessage(ctx)
		recv := time.Now()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			// go-redis resubscribes on the next call; pushes in the gap show
			// up as missing windows, and the error is reported.
			c.mu.Lock()
			c.recvErrs++
			c.lastErr = err
			c.mu.Unlock()
			time.Sleep(10 * time.Millisecond)
			continue
		}
		m, err := push.Decode([]byte(msg.Payload))
		c.mu.Lock()
		switch {
		case err != nil:
			c.badPushes++
			c.lastErr = err
		case msg.Channel != push.Channel(m.ActivityID):
			// The gateway forwards a channel's pushes to that activity's
			// page: one on another's channel never reaches its own.
			c.badPushes++
			c.lastErr = fmt.Errorf("a push of activity %d on channel %s", m.ActivityID, msg.Channel)
		default:
			p := pushed{
				Recv:     recv,
				WindowID: m.Record.ID,
				Key:      comboKey{Activity: m.ActivityID, User: m.Record.UserID, ItemType: m.Record.ItemType},
				Quantity: int64(m.Record.Quantity),
			}
			if c.checked[m.ActivityID] {
				c.late[m.ActivityID] = append(c.late[m.ActivityID], p)
			} else if list, ok := c.tracked[m.ActivityID]; ok {
				c.tracked[m.ActivityID] = append(list, p)
			}
		}
		c.mu.Unlock()
	}
}

// track starts keeping activity's pushes.
func (c *collector) track(activity int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.tracked[activity]; !ok {
		c.tracked[activity] = []pushed{}
	}
}

// take returns activity's pushes so far and stops tracking it; later
// pushes for it are counted as late.
func (c *collector) take(activity int64) []pushed {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.tracked[activity]
	delete(c.tracked, activity)
	c.checked[activity] = true
	return p
}

func (c *collector) count(activity int64) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.tracked[activity])
}

// waitFor waits until activity has at least n pushes. Past due (when the
// last window should have been pushed) it keeps waiting while pushes still
// arrive, and gives up after quiet without one: a burst of windows closing
// together is pushed over seconds on a slow machine, and stopping at a
// fixed time would count its tail as missing. Then it waits a little
// longer, so a window pushed twice is seen too.
func (c *collector) waitFor(activity int64, n int64, due time.Time, quiet time.Duration) {
	seen, lastPush := c.count(activity), time.Now()
	for int64(seen) < n {
		now := time.Now()
		if now.After(due) && now.Sub(lastPush) >= quiet {
			break
		}
		time.Sleep(20 * time.Millisecond)
		if k := c.count(activity); k != seen {
			seen, lastPush = k, time.Now()
		}
	}
	time.Sleep(250 * time.Millisecond)
}

// problems describes receive or decode failures and late pushes, if any.
func (c *collector) problems() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	late := 0
	for _, ps := range c.late {
		late += len(ps)
	}
	if late > 0 {
		errs = append(errs, fmt.Errorf("%d pushes arrived for runs already checked (their runs are checked again with them at the end)", late))
	}
	if c.recvErrs > 0 || c.badPushes > 0 {
		errs = append(errs, fmt.Errorf("subscriber: %d receive errors, %d bad pushes (undecodable, or on another activity's channel), last: %w",
			c.recvErrs, c.badPushes, errors.Join(c.lastErr)))
	}
	return errors.Join(errs...)
}

// lateFor is the pushes of activity that arrived after its check.
func (c *collector) lateFor(activity int64) []pushed {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.late[activity]
}

func (c *collector) close() {
	c.cancel()
	_ = c.ps.Close()
	<-c.done
}
