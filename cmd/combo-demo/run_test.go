package main

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/combo-service/combo-service/internal/testkitex"
	"github.com/combo-service/combo-service/internal/testredis"
	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/push"
	"github.com/combo-service/combo-service/window"
)

// pushingService is a combo-service over Kitex: it windows reports per
// combo key by the contract's rule, as the service does, and publishes each
// window on Redis delay after W (W + grace, as the service does, with a
// grace longer than the demo's 300 ms wait for a push published twice);
// MergeLatest merges as fakeService does. With twice, it publishes every
// window a second time.
type pushingService struct {
	w, delay time.Duration
	rdb      *redis.Client
	twice    bool
	merge    fakeService
	mu       sync.Mutex
	open     map[window.Key]*openWindow
}

type openWindow struct {
	first *combo.Contribution
	qty   int32
}

func newPushingService(w time.Duration, rdb *redis.Client) *pushingService {
	return &pushingService{w: w, delay: 400 * time.Millisecond, rdb: rdb, merge: fakeService{w: w}, open: map[window.Key]*openWindow{}}
}

func (p *pushingService) ReportContribution(_ context.Context, req *combo.ReportContributionRequest) (*combo.ReportContributionResponse, error) {
	c := req.Contribution
	k := window.Key{ActivityID: c.ActivityId, UserID: c.UserId, ItemType: c.ItemType}
	p.mu.Lock()
	defer p.mu.Unlock()
	if o := p.open[k]; o != nil && window.Joins(o.first.CreatedAt, c.CreatedAt, window.SizeMillis(p.w), int64(o.qty), c.Quantity) {
		o.qty += c.Quantity
		return &combo.ReportContributionResponse{WindowId: o.first.Id, WindowQuantity: o.qty}, nil
	}
	o := &openWindow{first: c, qty: c.Quantity}
	p.open[k] = o
	time.AfterFunc(p.w+p.delay, func() { p.publish(k, o) })
	return &combo.ReportContributionResponse{WindowId: c.Id, WindowQuantity: c.Quantity}, nil
}

func (p *pushingService) publish(k window.Key, o *openWindow) {
	p.mu.Lock()
	if p.open[k] == o {
		delete(p.open, k)
	}
	r := push.RecordOf(o.first)
	r.Quantity, r.ComboCount = o.qty, o.qty
	p.mu.Unlock()
	payload, _ := json.Marshal(push.Message{ActivityID: k.ActivityID, Type: push.Type, Record: r})
	for range 1 + btoi(p.twice) {
		_ = p.rdb.Publish(context.Background(), push.Channel(k.ActivityID), payload).Err() // after the test, Redis may be gone
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func (p *pushingService) ReportContributions(context.Context, *combo.ReportContributionsRequest) (*combo.ReportContributionsResponse, error) {
	return nil, errors.New("the demo does not batch")
}

func (p *pushingService) MergeLatest(ctx context.Context, req *combo.MergeLatestRequest) (*combo.MergeLatestResponse, error) {
	return p.merge.MergeLatest(ctx, req)
}

// The scripted run, end to end over RPC and Redis: against a service that
// pushes every window once, W + grace after it opened, it waits for the last
// window and exits 0; against one that pushes
// every window twice, it exits 1 (README: a failed check exits 1, which is
// what a user or a CI job reads).
func TestRunExitStatus(t *testing.T) {
	const w = 500 * time.Millisecond // the script lasts 4 W
	srv := testredis.Start(t, testredis.Options{})
	for _, c := range []struct {
		name  string
		twice bool
		code  int
	}{
		{"every window pushed once", false, 0},
		{"every window pushed twice", true, 1},
	} {
		svc := newPushingService(w, srv.Client())
		svc.twice = c.twice
		o := options{addr: testkitex.Serve(t, svc), redisAddr: srv.Addr, window: w, grace: 500 * time.Millisecond,
			scenario: "script", activity: 1001, color: "never"}
		code, err := run(context.Background(), o)
		if code != c.code || (c.code == 1) != (err != nil && strings.Contains(err.Error(), "a check failed")) {
			t.Errorf("%s: run = %d, %v; want %d", c.name, code, err, c.code)
		}
	}
}
