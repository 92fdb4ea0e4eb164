package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/combo-service/combo-service/kitex_gen/combo"
)

// naiveStore is the source design's write path (seeds/000 §4.2), command for
// command: HINCRBY, ten HSETNX, EXPIRE, SETNX and, for a window's first
// purchase, XADD; each its own round trip, as the seed issues them. Its keys
// carry a per-run prefix ("naivebench:<run>:") so they never touch the
// service's "combo:" keys, and are deleted after the run.
type naiveStore struct {
	rdb    *redis.Client
	prefix string
}

func (s naiveStore) aggKey(c *combo.Contribution) string {
	return fmt.Sprintf("%sagg:%d:%s", s.prefix, c.UserId, c.ItemType)
}

func (s naiveStore) lockKey(c *combo.Contribution) string {
	return fmt.Sprintf("%sagg:lock:%d:%s", s.prefix, c.UserId, c.ItemType)
}

func (s naiveStore) stream() string { return s.prefix + "stream:contributions" }

// purchase is one purchase's Redis work. The seed ignores every error; the
// bench abandons the purchase at its first, so a failure is counted, not
// hidden.
func (s naiveStore) purchase(ctx context.Context, c *combo.Contribution) error {
	aggKey, lockKey := s.aggKey(c), s.lockKey(c)
	steps := []func() error{
		func() error { return s.rdb.HIncrBy(ctx, aggKey, "quantity", int64(c.Quantity)).Err() },
		func() error { return s.rdb.HSetNX(ctx, aggKey, "activity_id", c.ActivityId).Err() },
		func() error { return s.rdb.HSetNX(ctx, aggKey, "user_id", c.UserId).Err() },
		func() error { return s.rdb.HSetNX(ctx, aggKey, "star_id", c.StarId).Err() },
		func() error { return s.rdb.HSetNX(ctx, aggKey, "item_id", c.ItemId).Err() },
		func() error { return s.rdb.HSetNX(ctx, aggKey, "item_name", c.ItemName).Err() },
		func() error { return s.rdb.HSetNX(ctx, aggKey, "item_icon", c.ItemIcon).Err() },
		func() error { return s.rdb.HSetNX(ctx, aggKey, "nickname", c.Nickname).Err() },
		func() error { return s.rdb.HSetNX(ctx, aggKey, "avatar_url", c.AvatarUrl).Err() },
		func() error { return s.rdb.HSetNX(ctx, aggKey, "first_id", c.Id).Err() },
		func() error { return s.rdb.HSetNX(ctx, aggKey, "first_created_at", c.CreatedAt).Err() },
		func() error { return s.rdb.Expire(ctx, aggKey, 5*time.Second).Err() },
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return err
		}
	}
	isFirst, err := s.rdb.SetNX(ctx, lockKey, "1", 3*time.Second).Result()
	if err != nil || !isFirst {
		return err
	}
	expireAt := time.Now().Add(3 * time.Second).UnixMilli()
	return s.rdb.XAdd(ctx, &redis.XAddArgs{
		Stream: s.stream(),
		MaxLen: 100000,
		Approx: true,
		Values: map[string]any{
			"activity_id":      c.ActivityId,
			"user_id":          c.UserId,
			"item_type":        c.ItemType,
			"first_id":         c.Id,
			"first_created_at": c.CreatedAt,
			"expire_at_ms":     expireAt,
		},
	}).Err()
}

// cleanup deletes every key the run may have made (its keys are known: the
// run's combo keys), with UNLINK so Redis frees them off its main thread.
func (s naiveStore) cleanup(ctx context.Context, keys []comboKey) error {
	pipe := s.rdb.Pipeline()
	pipe.Unlink(ctx, s.stream())
	for i, k := range keys {
		c := &combo.Contribution{UserId: k.User, ItemType: k.ItemType}
		pipe.Unlink(ctx, s.aggKey(c), s.lockKey(c))
		if i%1000 == 999 {
			if _, err := pipe.Exec(ctx); err != nil {
				return err
			}
		}
	}
	_, err := pipe.Exec(ctx)
	return err
}

// runNaive drives the naive write path at the bench's concurrency, over the
// same combo keys and payloads as the service runs, and measures purchases
// per second and the latency of one purchase (all its round trips).
func runNaive(cfg config, rdb *redis.Client, wl *workload) (load, error) {
	s := naiveStore{rdb: rdb, prefix: "naivebench:" + strconv.FormatInt(wl.activity, 10) + ":"}
	l := closedLoop(cfg, wl, func(_ int, keys []comboKey, rec *recorder, more func(int) int) {
		for i := 0; more(1) == 1; i++ {
			c := wl.contribution(keys[i%len(keys)])
			start := time.Now()
			err := s.purchase(context.Background(), c)
			took := time.Since(start)
			rec.calls++
			rec.sent++
			rec.latencies = append(rec.latencies, took)
			if err != nil {
				rec.errors++
				if rec.firstErr == nil {
					rec.firstErr = err
				}
				continue
			}
			rec.acked++
		}
	})
	var keys []comboKey
	for k := 0; k < cfg.Keys; k++ {
		keys = append(keys, wl.key(int64(k)))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.cleanup(ctx, keys); err != nil {
		return l, fmt.Errorf("naive: cleanup of %s*: %w", s.prefix, err)
	}
	return l, nil
}
