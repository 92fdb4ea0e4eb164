package repo_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/combo-service/combo-service/internal/testredis"
	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/push"
	"github.com/combo-service/combo-service/repo"
)

// A published window says how many clients its PUBLISH reached, channel
// and pattern subscribers alike, and 0 for a channel no one listens on:
// the worker counts those (combo_windows_unheard_total), the one sign
// that no gateway is subscribed while every flush succeeds.
func TestFlushSaysHowManyClientsHeardThePush(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		r, _ := subscribedRepoWithGroups(t, rdb, settings()) // a subscriber of activity 7's channel
		var id int64
		heard := func(activity int64) int64 {
			t.Helper()
			id++
			c := contribution(id, "heard", time.Now().UnixMilli())
			c.ActivityId = activity
			return publishOne(t, r, c).Heard
		}
		if n := heard(8); n != 0 {
			t.Errorf("a push on a channel with no subscriber: Heard = %d, want 0", n)
		}
		if n := heard(7); n != 1 {
			t.Errorf("a push on a channel with one subscriber: Heard = %d, want 1", n)
		}
		pattern := rdb.PSubscribe(ctx, push.ChannelPattern) // as a gateway serving every activity does
		t.Cleanup(func() { pattern.Close() })
		if _, err := pattern.Receive(ctx); err != nil {
			t.Fatal(err)
		}
		if n := heard(8); n != 1 {
			t.Errorf("a push heard by a pattern subscriber: Heard = %d, want 1", n)
		}
		if n := heard(7); n != 2 {
			t.Errorf("a push heard on its channel and by a pattern: Heard = %d, want 2", n)
		}
	})
}

// PUBLISH on a master counts only the master's own subscribers. Redis
// sends the message on to its replicas, whose subscribers get it (README,
// Sentinel: "reach its replicas' subscribers too"), but they are not in
// the count: a gateway that subscribes on a replica (a Sentinel replica, a
// read-replica endpoint) hears every push while each is counted unheard,
// and ComboPushesUnheard fires. This pins that Heard says nothing of them.
func TestFlushHeardLeavesOutReplicaSubscribers(t *testing.T) {
	ctx := context.Background()
	master := testredis.Start(t, testredis.Options{})
	replica := testredis.Start(t, testredis.Options{Args: []string{"--replicaof", "127.0.0.1", strconv.Itoa(master.Port)}})
	rc := serviceLikeClient(t, replica.Addr)
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(rc.Info(ctx, "replication").Val(), "master_link_status:up") {
		if time.Now().After(deadline) {
			t.Fatal("the replica never linked to its master")
		}
		time.Sleep(20 * time.Millisecond)
	}
	onReplica := rc.Subscribe(ctx, push.Channel(8))
	t.Cleanup(func() { onReplica.Close() })
	if _, err := onReplica.Receive(ctx); err != nil {
		t.Fatal(err)
	}

	r, _ := subscribedRepoWithGroups(t, serviceLikeClient(t, master.Addr), settings()) // its subscriber is on activity 7
	c := contribution(1, "replica", time.Now().UnixMilli())
	c.ActivityId = 8
	fr := publishOne(t, r, c)
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	msg, err := onReplica.ReceiveMessage(rctx)
	if err != nil || !strings.Contains(msg.Payload, `"activity_id":8`) {
		t.Fatalf("the replica's subscriber: %v %v, want the push", msg, err)
	}
	if fr.Heard != 0 {
		t.Errorf("a push heard only on the master's replica: Heard = %d; Redis counts only the master's own subscribers", fr.Heard)
	}
}

// publishOne reports c alone, reads its window as consumer c1 and flushes
// it once due: it must be published.
func publishOne(t *testing.T, r *repo.Repo, c *combo.Contribution) repo.FlushResult {
	t.Helper()
	ctx := context.Background()
	if _, err := r.Report(ctx, []*combo.Contribution{c}); err != nil {
		t.Fatal(err)
	}
	ws, bad, _, err := r.Read(ctx, 0, "c1", ">", 10, 100*time.Millisecond)
	if err != nil || len(bad) != 0 || len(ws) != 1 {
		t.Fatalf("read: %v %v %v", ws, bad, err)
	}
	untilDue(t, r, ws)
	fr, err := r.Flush(ctx, ws)
	if err != nil || fr[0].Status != repo.Published {
		t.Fatalf("flush: %+v %v", fr, err)
	}
	return fr[0]
}

// A published window answers how late it was, by Redis's clock: its flush
// ran lag ms past due (the worker's push-lag metric). A flush run 300 ms
// past due said 0.
func TestFlushSaysHowLateItPublished(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		r, sub := subscribedRepo(t, rdb)
		if res, err := r.Report(ctx, []*combo.Contribution{contribution(1, "rose", base)}); err != nil || res[0].Outcome != repo.Opened {
			t.Fatalf("report: %+v %v, want opened", res, err)
		}
		ws, bad, _, err := r.Read(ctx, 0, "c1", ">", 10, 100*time.Millisecond)
		if err != nil || len(bad) != 0 || len(ws) != 1 {
			t.Fatalf("read: %v %v %v", ws, bad, err)
		}
		const late = 300 // ms past due
		for redisNowMs(t, rdb) < ws[0].Due+late {
			time.Sleep(20 * time.Millisecond)
		}
		before := redisNowMs(t, rdb)
		fr, err := r.Flush(ctx, ws)
		after := redisNowMs(t, rdb)
		if err != nil || fr[0].Status != repo.Published {
			t.Fatalf("flush: %+v %v, want published", fr, err)
		}
		if lag := fr[0].Lag.Milliseconds(); lag < before-ws[0].Due || lag > after-ws[0].Due {
			t.Fatalf("published %d ms past due, want between %d and %d (Redis TIME before and after the flush, less due)",
				lag, before-ws[0].Due, after-ws[0].Due)
		}
		if _, err := receive(ctx, sub); err != nil {
			t.Fatal(err)
		}
	})
}
