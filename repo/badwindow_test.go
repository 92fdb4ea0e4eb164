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
		v, err := rdb.Get(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		// Keep the window's head (quantity, anchor, id, created_at, entry
		// id) and the first three of the six fields of its record.
		fields := strings.Split(v, push.FragmentSep)
		if len(fields) != 11 {
			t.Fatalf("window value has %d fields, want 11: %q", len(fields), v)
		}
		damaged := strings.Join(fields[:8], push.FragmentSep)
		if err := rdb.SetArgs(ctx, key, damaged, redis.SetArgs{KeepTTL: true}).Err(); err != nil {
			t.Fatal(err)
		}
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
