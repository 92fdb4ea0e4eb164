package repo_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/combo-service/combo-service/internal/testredis"
	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/repo"
)

// spinLua keeps Redis busy for ARGV[1] loop iterations: Redis runs one
// script at a time, so every other client waits, as behind a heavy load.
// It counts iterations, calibrated by busyRedis, and reads no clock: since
// Redis 7.2 TIME inside a script answers the time the script started (a
// loop on it never ended), and Redis before 7.4 has no os.clock.
const spinLua = `
local x = 0
for i = 1, tonumber(ARGV[1]) do x = x + i end
return 0`

// busyRedis runs spinLua for spin, again and again from a connection of
// its own, until the returned stop is called.
func busyRedis(t *testing.T, addr string, spin time.Duration) (stop func()) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	// Calibrate: how many iterations take spin.
	iters := int64(1_000_000)
	start := time.Now()
	if err := c.Eval(context.Background(), spinLua, nil, iters).Err(); err != nil {
		t.Fatalf("spin: %v", err)
	}
	iters = max(1, int64(float64(iters)*float64(spin)/float64(time.Since(start))))
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			if err := c.Eval(context.Background(), spinLua, nil, iters).Err(); err != nil {
				t.Errorf("spin: %v", err)
				return
			}
		}
	})
	return sync.OnceFunc(func() { close(done); wg.Wait(); c.Close() })
}

// A flood of batches (each on a pipeline of its own) against a Redis that
// answers, but slowly: no batch answered UNAVAILABLE was counted. They used
// to start all at once and queue for the client's pooled connections on
// redis.timeout's clock: one that got its connection late was sent with
// little of that time left, counted by Redis, and answered UNAVAILABLE when
// the rest ran out. Its caller's retry then came back a duplicate, and the
// service had spent Redis's time, under overload, on an answer it dropped.
func TestBatchAnsweredUnavailableWasNotCounted(t *testing.T) {
	const timeout = 200 * time.Millisecond
	srv := testredis.Start(t, testredis.Options{})
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 4, MaxRetries: -1, ContextTimeoutEnabled: true,
		DialTimeout: timeout, ReadTimeout: timeout, WriteTimeout: timeout, PoolTimeout: timeout}) // as openRedis
	t.Cleanup(func() { rdb.Close() })
	s := settings()
	s.Timeout = timeout
	r := repo.New(rdb, s)
	ctx := context.Background()
	if err := r.LoadScripts(ctx); err != nil {
		t.Fatal(err)
	}

	const calls, size = 300, 20 // 20: a call of its own (bigCall)
	batches := make([][]*combo.Contribution, calls)
	for i := range batches {
		for j := range size {
			batches[i] = append(batches[i], contribution(int64(i*size+j+1), "rose", base))
		}
	}
	stop := busyRedis(t, srv.Addr, 10*time.Millisecond) // a round trip takes up to 10 ms, far below timeout
	errs := make([]error, calls)
	var wg sync.WaitGroup
	for i, b := range batches {
		wg.Go(func() { _, errs[i] = r.Report(ctx, b) })
	}
	wg.Wait()
	stop()

	// The retries only ask whether a batch was counted: they go through
	// a client of their own, with a timeout a loaded machine cannot miss
	// (under the flood's 200 ms one, one failed "write: i/o timeout").
	check := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, ContextTimeoutEnabled: true,
		DialTimeout: 10 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second})
	t.Cleanup(func() { check.Close() })
	cs := settings()
	cs.Timeout = 10 * time.Second
	retry := repo.New(check, cs)
	if err := retry.LoadScripts(ctx); err != nil {
		t.Fatal(err)
	}
	var failed, counted int
	for i, err := range errs {
		if err == nil {
			continue
		}
		if !errors.Is(err, repo.ErrUnavailable) {
			t.Fatalf("batch %d: %v, want ErrUnavailable or success", i, err)
		}
		failed++
		res, err := retry.Report(ctx, batches[i]) // the caller's retry, Redis idle now
		if err != nil {
			t.Fatal(err)
		}
		for _, rr := range res {
			if rr.Outcome == repo.Duplicate {
				counted++
				break
			}
		}
	}
	t.Logf("%d of %d batches answered UNAVAILABLE", failed, calls)
	if failed == 0 {
		t.Errorf("no batch failed: the test no longer overloads Redis as it means to")
	}
	if counted > 0 {
		t.Errorf("%d of the %d batches answered UNAVAILABLE had been counted (their retry was a duplicate), want none: "+
			"a round trip took at most about 10 ms of the %v redis.timeout once sent", counted, failed, timeout)
	}
}
