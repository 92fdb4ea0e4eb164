package repo_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/combo-service/combo-service/internal/testredis"
	"github.com/combo-service/combo-service/push"
	"github.com/combo-service/combo-service/repo"
)

// A window whose record does not parse (damaged data, or a layout this
// version did not write) is neither deleted nor published by a flush: the
// flush answers an error naming the window and changes nothing, and once
// the window is stale it is dropped as stale. Before, the script deleted
// the window and its entry first and then failed building the push: the
// window vanished unpublished and uncounted, with an error answer.
func TestFlushOfAnUnparsableWindowChangesNothing(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		r, sub := subscribedRepo(t, rdb)
		ws := openWindow(t, r)
		key := r.Keys().Current(0, 7, 42, "rose")
		damaged := damageWindow(t, rdb, key)
		untilDue(t, r, ws)

		res, err := r.Flush(ctx, ws)
		if err != nil {
			t.Fatal(err)
		}
		if res[0].Err == nil || !strings.Contains(res[0].Err.Error(), "BADWINDOW") ||
			!strings.Contains(res[0].Err.Error(), ws[0].ID) {
			t.Fatalf("flush of an unparsable window: %+v, want a BADWINDOW error naming entry %s", res[0], ws[0].ID)
		}
		if got, err := rdb.Get(ctx, key).Result(); err != nil || got != damaged {
			t.Fatalf("the window after the failed flush: %q %v, want it kept as it was", got, err)
		}
		stream := r.Keys().Stream(0)
		if p, err := rdb.XPending(ctx, stream, repo.Group).Result(); err != nil || p.Count != 1 {
			t.Fatalf("pending after the failed flush: %+v %v, want the window's entry", p, err)
		}
		if msg, err := testredis.MessageBeforePong(ctx, sub); err != nil {
			t.Fatal(err)
		} else if msg != nil {
			t.Fatalf("the failed flush published %s", msg.Payload)
		}

		// Past window.stale (a repo on the same keys whose stale has passed),
		// the window goes as stale, with its quantity.
		s := settings()
		s.Stale = time.Millisecond
		res, err = repo.New(rdb, s).Flush(ctx, ws)
		if err != nil || res[0].Err != nil || res[0].Status != repo.Stale || res[0].Quantity != 1 {
			t.Fatalf("flush of the unparsable window once stale: %+v %v, want stale, quantity 1", res, err)
		}
		if n := rdb.Exists(ctx, key).Val() + rdb.XLen(ctx, stream).Val(); n != 0 {
			t.Fatalf("%d of the window's key and entry left after it went stale, want none", n)
		}
	})
}

// damageWindow cuts the record of the window at key so that it no longer
// parses, and returns what it left there: the window's head (quantity,
// anchor, id, created_at, entry id) and the first three of the six fields
// of its record.
func damageWindow(t *testing.T, rdb redis.UniversalClient, key string) string {
	t.Helper()
	ctx := context.Background()
	v, err := rdb.Get(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	fields := strings.Split(v, push.FragmentSep)
	if len(fields) != 11 {
		t.Fatalf("window value has %d fields, want 11: %q", len(fields), v)
	}
	damaged := strings.Join(fields[:8], push.FragmentSep)
	if err := rdb.SetArgs(ctx, key, damaged, redis.SetArgs{KeepTTL: true}).Err(); err != nil {
		t.Fatal(err)
	}
	return damaged
}

// A BADWINDOW reply names its window's key, and so the caller's item_type:
// one that holds a Cluster refusal's words (Valkey 9's "' while the
// cluster is down" among them) must leave it the window's own error, not
// fail the whole flush batch as Redis unavailable (the batch's other
// windows, published, then answered as failed).
func TestBadWindowNamingARefusalIsNotUnavailable(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		r, _ := subscribedRepo(t, rdb)
		for _, itemType := range []string{"rose' while the cluster is down", "Script attempted to access a non local key"} {
			ws := openWindowOf(t, r, int64(len(itemType)), itemType)
			damageWindow(t, rdb, r.Keys().Current(0, 7, 42, itemType))
			untilDue(t, r, ws)
			res, err := r.Flush(ctx, ws)
			if err != nil {
				t.Fatalf("item_type %q: flush of an unparsable window failed whole: %v, want its own BADWINDOW error", itemType, err)
			}
			if res[0].Err == nil || !strings.Contains(res[0].Err.Error(), "BADWINDOW") {
				t.Fatalf("item_type %q: %+v, want a BADWINDOW error", itemType, res[0])
			}
		}
	})
}
