package validate

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/combo-service/combo-service/kitex_gen/combo"
)

// violations are the fields of c that break CONTRACT.md §1, read from its
// table (and MaxCreatedAt), independently of check.
func violations(c *combo.Contribution) map[string]bool {
	text := func(s string, max int) bool { return len(s) > max || !utf8.ValidString(s) }
	bad := map[string]bool{
		"id": c.Id <= 0, "activity_id": c.ActivityId <= 0, "user_id": c.UserId <= 0, "star_id": c.StarId < 0,
		"item_id": c.ItemId <= 0, "item_type": len(c.ItemType) < 1 || text(c.ItemType, MaxItemType) || strings.IndexFunc(c.ItemType, unicode.IsControl) >= 0,
		"item_name": text(c.ItemName, MaxName), "item_icon": text(c.ItemIcon, MaxURL), "nickname": text(c.Nickname, MaxName),
		"avatar_url": text(c.AvatarUrl, MaxURL), "quantity": c.Quantity < 1 || c.Quantity > MaxQuantity,
		"created_at": c.CreatedAt < MinCreatedAt || c.CreatedAt > MaxCreatedAt,
	}
	for k, v := range bad {
		if !v {
			delete(bad, k)
		}
	}
	return bad
}

// named checks err refuses exactly when bad is not empty, and names, under
// prefix, one field that is bad, in a message that starts with it.
func named(t *testing.T, err error, prefix string, bad map[string]bool) {
	t.Helper()
	if err == nil {
		if len(bad) > 0 {
			t.Fatalf("accepted with %v bad", bad)
		}
		return
	}
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("%v: not an *Error", err)
	}
	field, ok := strings.CutPrefix(e.Field, prefix+".")
	if !ok || !bad[field] {
		t.Fatalf("%q names %q, the bad fields under %q are %v", err, e.Field, prefix, bad)
	}
	if !strings.HasPrefix(err.Error(), e.Field+": ") || e.Reason == "" {
		t.Fatalf("message %q does not start with its field %q and say why", err, e.Field)
	}
}

// FuzzContribution: any row is accepted exactly when the contract allows
// it, and a refusal names a bad field by its full path.
func FuzzContribution(f *testing.F) {
	g := good()
	f.Add(g.Id, g.ActivityId, g.UserId, g.StarId, g.ItemId, g.ItemType, g.ItemName, g.Nickname, 0, g.Quantity, g.CreatedAt, 3)
	f.Add(int64(0), int64(-1), int64(1), int64(-1), int64(0), "", "\xff", "\x85", 2049, int32(0), int64(1732950000), 0)
	f.Add(int64(1), int64(1), int64(1), int64(0), int64(1), "a\u0085b", "", "", 0, int32(MaxQuantity+1), int64(MaxCreatedAt+1), 1)
	f.Fuzz(func(t *testing.T, id, activity, user, star, item int64, itemType, name, nick string, urlLen int, qty int32, created int64, index int) {
		url := ""
		if urlLen > 0 {
			url = strings.Repeat("u", urlLen%(MaxURL+2))
		}
		c := &combo.Contribution{Id: id, ActivityId: activity, UserId: user, StarId: star, ItemId: item, ItemType: itemType,
			ItemName: name, ItemIcon: url, Nickname: nick, AvatarUrl: nick + url, Quantity: qty, CreatedAt: created}
		bad := violations(c)
		named(t, Contribution(c, "contribution"), "contribution", bad)

		// In a batch, the bad row is named by its index.
		// Unsigned: -index of math.MinInt64 is itself, and a negative
		// length made the test panic, not the code under test.
		n := int(uint(index)%5) + 1
		cs := make([]*combo.Contribution, n)
		for i := range cs {
			cs[i] = good()
		}
		i := int(uint(index) % uint(n))
		cs[i] = c
		named(t, Contributions(cs), fmt.Sprintf("contributions[%d]", i), bad)

		// A MergeLatest record is the row without its activity_id.
		r := &combo.ContributionRecord{Id: id, UserId: user, Nickname: nick, AvatarUrl: nick + url, StarId: star, ItemId: item,
			ItemType: itemType, ItemName: name, ItemIcon: url, Quantity: qty, ComboCount: qty, CreatedAt: created}
		delete(bad, "activity_id")
		named(t, Record(7, r, 0), "records[0]", bad)
	})
}
