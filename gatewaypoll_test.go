package main

import (
	"context"
	"testing"
	"time"

	"github.com/combo-service/combo-service/conf"
	"github.com/combo-service/combo-service/kitex_gen/combo"
)

// README, For the gateway: a window still open when the gateway polls
// (MergeLatest right after SUBSCRIBE) is in the poll's answer with the rows
// counted so far, and comes again in its push with all of them. The gateway
// replaces the polled record with the push's when the push carries its id
// (or its user_id, item_type and created_at), rather than adding a second
// feed item: that holds when a key's later rows have larger ids and
// created_at, as DB rows reported in order do, and each reached the
// service before its window was pushed (a late one re-cuts the key's
// windows on the push path: README).
func TestPushOfAWindowPolledOpenCarriesThePolledRecordsKey(t *testing.T) {
	s := startService(t, options{mutate: func(c *conf.Config) {
		c.Window.Size, c.Window.Grace = time.Second, 100*time.Millisecond
		c.Worker.ClaimIdle = conf.DefaultClaimIdle(c.Window)
	}})
	ctx := context.Background()
	row := func(c *combo.Contribution) *combo.ContributionRecord {
		return &combo.ContributionRecord{Id: c.Id, UserId: c.UserId, Nickname: c.Nickname, AvatarUrl: c.AvatarUrl,
			StarId: c.StarId, ItemId: c.ItemId, ItemType: c.ItemType, ItemName: c.ItemName, ItemIcon: c.ItemIcon,
			Quantity: c.Quantity, CreatedAt: c.CreatedAt}
	}
	for try := 0; ; try++ {
		a := newActivity()
		start := time.Now()
		first, second := gift(a, 1, "rose", 1), gift(a, 1, "rose", 2)
		second.CreatedAt = first.CreatedAt + 1
		s.report(first)
		s.report(second)
		polled, err := s.rpc.MergeLatest(ctx, &combo.MergeLatestRequest{ActivityId: a,
			Records: []*combo.ContributionRecord{row(first), row(second)}})
		if err != nil {
			t.Fatal(err)
		}
		third := gift(a, 1, "rose", 4) // joins after the poll
		third.CreatedAt = first.CreatedAt + 2
		joined := s.report(third)
		if time.Since(start) >= s.cfg.Window.Size || joined.WindowQuantity != 7 {
			// A stalled host had the window pushed before the third report.
			if try == 4 {
				t.Fatalf("5 tries: the third report did not join the polled window (%+v)", joined)
			}
			continue
		}
		if len(polled.Records) != 1 || polled.Records[0].Quantity != 3 {
			t.Fatalf("poll of the open window = %+v, want one record of quantity 3", polled.Records)
		}
		p := polled.Records[0]
		got := s.pushes.waitFor(1, wait, forActivity(a))[0].msg.Record
		if got.ID != p.Id || got.UserID != p.UserId || got.ItemType != p.ItemType || got.CreatedAt != p.CreatedAt {
			t.Errorf("push %+v does not carry the polled record's id, user_id, item_type and created_at (%+v)", got, p)
		}
		if got.Quantity != 7 {
			t.Errorf("push quantity %d, want 7 (the poll's 3 and the report after it)", got.Quantity)
		}
		s.pushes.quiet(300*time.Millisecond, 1, forActivity(a))
		return
	}
}
