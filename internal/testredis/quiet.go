package testredis

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// pongs numbers MessageBeforePong's PINGs.
var pongs atomic.Int64

// MessageBeforePong shows that nothing was published on sub's channels
// up to now without waiting a fixed time: it PINGs on the subscription's
// connection, whose answer Redis sends after every message it published
// there before. It returns the first message received before that answer,
// or nil if none came; an error if no answer came within 5 s. The PING
// carries a payload of its own: the answer to an earlier call's PING,
// left unread when that call returned a message, is not this one's.
func MessageBeforePong(ctx context.Context, sub *redis.PubSub) (*redis.Message, error) {
	token := "testredis.MessageBeforePong " + strconv.FormatInt(pongs.Add(1), 10)
	if err := sub.Ping(ctx, token); err != nil {
		return nil, fmt.Errorf("testredis.MessageBeforePong: %w", err)
	}
	for {
		got, err := sub.ReceiveTimeout(ctx, 5*time.Second)
		if err != nil {
			return nil, fmt.Errorf("testredis.MessageBeforePong: %w", err)
		}
		switch got := got.(type) {
		case *redis.Message:
			return got, nil
		case *redis.Pong:
			if got.Payload == token {
				return nil, nil
			}
		}
	}
}
