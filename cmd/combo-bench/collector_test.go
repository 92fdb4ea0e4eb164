package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/combo-service/combo-service/internal/testredis"
	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/push"
)

// add records one push for activity, as the receive loop does.
func (c *collector) add(activity int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.tracked[activity] = append(c.tracked[activity], pushed{Recv: time.Now()})
}

// waitFor keeps waiting past due while pushes still arrive, so the tail of
// a burst is not counted as missing, and stops once they pause for quiet.
func TestWaitForFollowsTrailingPushes(t *testing.T) {
	c := &collector{tracked: map[int64][]pushed{}}
	c.track(1)
	due := time.Now().Add(50 * time.Millisecond)
	quiet := time.Second
	go func() {
		// 10 pushes, 100 ms apart: the last comes ~1 s after due, each
		// within quiet of the one before.
		for range 10 {
			time.Sleep(100 * time.Millisecond)
			c.add(1)
		}
	}()
	c.waitFor(1, 10, due, quiet)
	if n := c.count(1); n != 10 {
		t.Fatalf("waitFor returned with %d of 10 pushes", n)
	}

	// Pushes that stop short: waitFor gives up about quiet after the last.
	c.track(2)
	c.add(2)
	start := time.Now()
	c.waitFor(2, 5, time.Now(), quiet)
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("waitFor waited %v for pushes that never came", took)
	}
	if n := c.count(2); n != 1 {
		t.Fatalf("count %d, want 1", n)
	}
}

// trackingCollector starts a Redis and a collector tracking activity (both
// closed at the test's end), and returns a contribution of activity with
// the payload of its push on its own.
func trackingCollector(t *testing.T, activity int64) (*redis.Client, *collector, *combo.Contribution, []byte) {
	t.Helper()
	rdb := testredis.Start(t, testredis.Options{}).Client()
	col, err := startCollector(context.Background(), rdb)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(col.close)
	col.track(activity)
	c := &combo.Contribution{Id: 1, ActivityId: activity, UserId: 1000, StarId: 7, ItemId: 4, ItemType: "rose",
		Quantity: 3, CreatedAt: time.Now().UnixMilli()}
	payload, err := push.Single(c)
	if err != nil {
		t.Fatal(err)
	}
	return rdb, col, c, payload
}

// A window pushed again after its run was checked (as a claimer would,
// seconds later) is not dropped unseen: the collector counts it and says so.
func TestLatePushesAreReported(t *testing.T) {
	ctx := context.Background()
	const activity = int64(777)
	rdb, col, c, payload := trackingCollector(t, activity)
	publish := func() {
		if err := rdb.Publish(ctx, push.Channel(activity), payload).Err(); err != nil {
			t.Fatal(err)
		}
	}
	rec := newRecorder()
	sent := time.Now()
	rec.observe(sent, time.Millisecond, []*combo.Contribution{c}, []*combo.ReportContributionResponse{{WindowId: 1, WindowQuantity: 3}}, nil)
	publish()
	col.waitFor(activity, 1, time.Now(), time.Second)
	taken := col.take(activity)
	if n := len(taken); n != 1 {
		t.Fatalf("took %d pushes, want 1", n)
	}
	if err := col.problems(); err != nil {
		t.Fatalf("problems before the late push: %v", err)
	}
	publish() // the same window again, after its check
	deadline := time.Now().Add(5 * time.Second)
	for col.problems() == nil {
		if time.Now().After(deadline) {
			t.Fatal("a push for an activity already checked went unreported")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := col.problems(); !strings.Contains(err.Error(), "1 pushes arrived for runs already checked") {
		t.Fatalf("problems: %v", err)
	}
	// And its run, checked again, pushed that window twice: not conserved,
	// whatever run was going on when it came; another activity's run is
	// untouched.
	W, grace := time.Duration(0), time.Duration(0)
	mine := runCheck(activity, rec, taken, nil, W, grace)
	other := pushCheck{Conserved: true, activity: activity + 1, rec: newRecorder()}
	if !mine.Conserved {
		t.Fatalf("check before the late push: %+v", mine)
	}
	amendLate(runs{{Pushes: &mine}, {Pushes: &other}, {}}, col)
	if mine.Conserved || mine.PushedTwice != 1 || mine.LatePushes != 1 || !other.Conserved || other.LatePushes != 0 {
		t.Fatalf("after amendLate: this run %+v, another %+v", mine, other)
	}
}

// A push on another activity's channel is a bad push, not one of its own
// activity's: the gateway would forward it to the wrong page.
func TestPushOnAnotherActivitysChannelIsBad(t *testing.T) {
	ctx := context.Background()
	const activity = int64(777)
	rdb, col, _, payload := trackingCollector(t, activity)
	if err := rdb.Publish(ctx, push.Channel(activity+1), payload).Err(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for col.problems() == nil {
		if time.Now().After(deadline) {
			t.Fatal("a push on another activity's channel went unreported")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := col.problems(); !strings.Contains(err.Error(), "1 bad pushes") ||
		!strings.Contains(err.Error(), "on channel "+push.Channel(activity+1)) {
		t.Fatalf("problems: %v", err)
	}
	if n := col.count(activity); n != 0 {
		t.Fatalf("the push on the wrong channel counted as %d of activity %d's", n, activity)
	}
}
