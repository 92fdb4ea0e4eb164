package worker

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest"

	"github.com/combo-service/combo-service/internal/testredis"
	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/metrics"
	"github.com/combo-service/combo-service/push"
	"github.com/combo-service/combo-service/repo"
)

func TestRedisClockRunsOnFromItsEstimate(t *testing.T) {
	var c redisClock
	if d := c.now() - time.Now().UnixMilli(); d < -5 || d > 5 {
		t.Fatalf("before any reading now() is %d ms off the wall clock", d)
	}
	at := time.Now().Add(-250 * time.Millisecond)
	c.observe(1_000_000, at, at)
	if got := c.now(); got < 1_000_250 || got > 1_000_300 {
		t.Fatalf("now() = %d, want about 1000250", got)
	}
	if d := c.until(c.now() + 100); d < 90*time.Millisecond || d > 100*time.Millisecond {
		t.Fatalf("until(now+100ms) = %s", d)
	}
}

// The estimate is the best lower bound the readings agree with.
func TestRedisClockKeepsTheBestAgreeingReading(t *testing.T) {
	base := time.Now()
	ms := func(n int) time.Time { return base.Add(time.Duration(n) * time.Millisecond) }
	var c redisClock
	c.observe(10_000, ms(0), ms(0))
	estAt := func(at time.Time) int64 { return c.redisMs + at.Sub(c.at).Milliseconds() }
	steps := []struct {
		name       string
		reading    int64
		sent, recv time.Time
		want       int64 // the estimate at recv afterwards
	}{
		// Taken 3 ms before its reply arrived (a 5 ms round trip): agrees,
		// and the estimate is closer: kept.
		{"lagging reading", 10_097, ms(95), ms(100), 10_100},
		// Above the estimate: Redis is at least there; raised.
		{"higher reading", 10_210, ms(199), ms(200), 10_210},
		// Far below even with its round trip: Redis's clock went back.
		{"clock jumped back", 9_000, ms(299), ms(300), 9_000},
		{"after the jump, a lagging reading", 9_098, ms(397), ms(400), 9_100},
	}
	for _, s := range steps {
		c.observe(s.reading, s.sent, s.recv)
		if got := estAt(s.recv); got != s.want {
			t.Fatalf("%s: estimate %d, want %d", s.name, got, s.want)
		}
	}
}

// timeCounting counts the TIME reads of the worker (prepare, housekeeper).
type timeCounting struct {
	*repo.Repo
	times atomic.Int64
}

func (s *timeCounting) Time(ctx context.Context) (time.Time, error) {
	defer s.times.Add(1)
	return s.Repo.Time(ctx)
}

func startClockWorker(t *testing.T, sampleEvery time.Duration) (*Worker, *timeCounting, *repo.Repo, <-chan time.Time) {
	t.Helper()
	ctx := context.Background()
	rdb := testredis.Start(t, testredis.Options{}).Client()
	r := repo.New(rdb, repo.Settings{Window: 150 * time.Millisecond, Grace: 20 * time.Millisecond, Dedupe: time.Minute,
		Stale: time.Minute, Timeout: time.Second, Shards: 1, StreamMaxLen: 100000})
	if err := r.LoadScripts(ctx); err != nil {
		t.Fatal(err)
	}
	sub := rdb.PSubscribe(ctx, push.ChannelPattern)
	t.Cleanup(func() { sub.Close() })
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	pushed := make(chan time.Time, 16)
	go func() {
		for range sub.Channel() {
			pushed <- time.Now()
		}
	}()
	store := &timeCounting{Repo: r}
	wk := New(store, Config{Consumer: "c1", ClaimIdle: time.Hour, Block: 50 * time.Millisecond, SampleEvery: sampleEvery},
		zaptest.NewLogger(t), metrics.New(prometheus.NewRegistry()))
	wk.Start()
	t.Cleanup(func() { wk.Shutdown(context.Background()) })
	// prepare and the housekeeper's first round have read TIME.
	deadline := time.Now().Add(10 * time.Second)
	for store.times.Load() < 2 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if store.times.Load() < 2 {
		t.Fatal("the worker never read Redis's clock")
	}
	return wk, store, r, pushed
}

// An estimate of Redis's clock that is 2 s behind (as after a failover to a
// master whose clock is ahead) makes one window late; its flush reply says
// how late, and the next window goes out on time.
func TestFlushRepliesCorrectTheClock(t *testing.T) {
	wk, _, r, pushed := startClockWorker(t, time.Hour)
	now := time.Now()
	wk.clock.observe(wk.clock.now()-2000, now, now) // 2 s behind, for sure: replaces the estimate
	report := func(id, activity int64) time.Duration {
		start := time.Now()
		c := &combo.Contribution{Id: id, ActivityId: activity, UserId: 1, ItemId: 1, ItemType: "x", Quantity: 1,
			CreatedAt: time.Now().UnixMilli()}
		if _, err := r.Report(context.Background(), []*combo.Contribution{c}); err != nil {
			t.Fatal(err)
		}
		select {
		case at := <-pushed:
			return at.Sub(start)
		case <-time.After(10 * time.Second):
			t.Fatal("no push")
			return 0
		}
	}
	if took := report(1, 5); took < time.Second {
		t.Fatalf("first window pushed %s after its report: the estimate was not 2 s behind", took)
	}
	// Due 170 ms after its report; generous margin, far below the 2 s skew.
	if took := report(2, 6); took > time.Second {
		t.Fatalf("second window pushed %s after its report, want on time: the reply did not correct the clock", took)
	}
}

// The housekeeper reads Redis's clock again, so a wrong estimate is
// corrected even while no window is flushed.
func TestHousekeeperResyncsTheClock(t *testing.T) {
	wk, store, r, _ := startClockWorker(t, 50*time.Millisecond)
	now := time.Now()
	wk.clock.observe(wk.clock.now()-2000, now, now) // 2 s behind, for sure: replaces the estimate
	before := store.times.Load()
	deadline := time.Now().Add(10 * time.Second)
	for store.times.Load() < before+2 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	redisNow, err := r.Time(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if d := redisNow.UnixMilli() - wk.clock.now(); d < -100 || d > 100 {
		t.Fatalf("estimate %d ms off Redis's clock after the housekeeper ran", d)
	}
}
