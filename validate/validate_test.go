package validate

import (
	"errors"
	"strings"
	"testing"

	"github.com/combo-service/combo-service/kitex_gen/combo"
)

func good() *combo.Contribution {
	return &combo.Contribution{
		Id: 1, ActivityId: 7, UserId: 42, StarId: 0, ItemId: 3,
		ItemType: "烟花 {x}:y", ItemName: "Firework", ItemIcon: "https://cdn/i.png",
		Nickname: "小明", AvatarUrl: "https://cdn/a.png", Quantity: 1, CreatedAt: 1732950000123,
	}
}

func TestContribution(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(c *combo.Contribution)
		field  string // "" means valid
		reason string // substring of the reason
	}{
		{"valid", func(c *combo.Contribution) {}, "", ""},
		{"valid star 0 and empty texts", func(c *combo.Contribution) { c.StarId, c.ItemName, c.Nickname = 0, "", "" }, "", ""},
		{"valid max lengths", func(c *combo.Contribution) {
			c.ItemType, c.ItemName, c.ItemIcon = strings.Repeat("a", 64), strings.Repeat("n", 256), strings.Repeat("i", 2048)
			c.Nickname, c.AvatarUrl, c.Quantity = strings.Repeat("n", 256), strings.Repeat("u", 2048), 1000000
		}, "", ""},
		{"id zero", func(c *combo.Contribution) { c.Id = 0 }, "id", "must be > 0"},
		{"id negative", func(c *combo.Contribution) { c.Id = -5 }, "id", "got -5"},
		{"activity zero", func(c *combo.Contribution) { c.ActivityId = 0 }, "activity_id", "must be > 0"},
		{"user zero", func(c *combo.Contribution) { c.UserId = 0 }, "user_id", "must be > 0"},
		{"star negative", func(c *combo.Contribution) { c.StarId = -1 }, "star_id", "must be >= 0"},
		{"item id zero", func(c *combo.Contribution) { c.ItemId = 0 }, "item_id", "must be > 0"},
		{"item type empty", func(c *combo.Contribution) { c.ItemType = "" }, "item_type", "1..64 bytes, got 0"},
		{"item type 65 bytes", func(c *combo.Contribution) { c.ItemType = strings.Repeat("a", 65) }, "item_type", "got 65"},
		{"item type control", func(c *combo.Contribution) { c.ItemType = "a\nb" }, "item_type", "control"},
		{"item type DEL", func(c *combo.Contribution) { c.ItemType = "a\x7f" }, "item_type", "control"},
		{"item type NUL", func(c *combo.Contribution) { c.ItemType = "a\x00" }, "item_type", "control"},
		// The byte offset lets a caller find the character in a long value.
		{"item type C1 control", func(c *combo.Contribution) { c.ItemType = "a\u0085b" }, "item_type", "found U+0085 at byte 1"},
		{"item type bad utf8", func(c *combo.Contribution) { c.ItemType = "a\xff" }, "item_type", "UTF-8"},
		{"item name long", func(c *combo.Contribution) { c.ItemName = strings.Repeat("n", 257) }, "item_name", "at most 256"},
		{"item name bad utf8", func(c *combo.Contribution) { c.ItemName = "\xc3\x28" }, "item_name", "UTF-8"},
		{"item icon long", func(c *combo.Contribution) { c.ItemIcon = strings.Repeat("i", 2049) }, "item_icon", "at most 2048"},
		{"item icon bad utf8", func(c *combo.Contribution) { c.ItemIcon = "https://cdn/\xff.png" }, "item_icon", "UTF-8"},
		{"nickname long", func(c *combo.Contribution) { c.Nickname = strings.Repeat("n", 257) }, "nickname", "at most 256"},
		{"nickname bad utf8", func(c *combo.Contribution) { c.Nickname = "\xff" }, "nickname", "UTF-8"},
		{"avatar long", func(c *combo.Contribution) { c.AvatarUrl = strings.Repeat("u", 2049) }, "avatar_url", "at most 2048"},
		{"avatar bad utf8", func(c *combo.Contribution) { c.AvatarUrl = "\xff" }, "avatar_url", "UTF-8"},
		{"quantity zero", func(c *combo.Contribution) { c.Quantity = 0 }, "quantity", "1..1000000"},
		{"quantity too big", func(c *combo.Contribution) { c.Quantity = 1000001 }, "quantity", "got 1000001"},
		{"created_at seconds", func(c *combo.Contribution) { c.CreatedAt = 1732950000 }, "created_at", "must be unix milliseconds, got 1732950000 (that looks like seconds)"},
		{"created_at zero", func(c *combo.Contribution) { c.CreatedAt = 0 }, "created_at", "unix milliseconds"},
		// The seconds hint's edges: 10^9 to 10^11 - 1 (2001 to 5138 in seconds).
		{"created_at seconds, highest", func(c *combo.Contribution) { c.CreatedAt = 99_999_999_999 }, "created_at", "(that looks like seconds)"},
		{"created_at seconds, lowest", func(c *combo.Contribution) { c.CreatedAt = 1_000_000_000 }, "created_at", "(that looks like seconds)"},
		{"created_at past seconds", func(c *combo.Contribution) { c.CreatedAt = 100_000_000_000 }, "created_at", "must be unix milliseconds >= 1000000000000, got 100000000000"},
		{"created_at below seconds", func(c *combo.Contribution) { c.CreatedAt = 999_999_999 }, "created_at", "must be unix milliseconds >= 1000000000000, got 999999999"},
		{"created_at just below", func(c *combo.Contribution) { c.CreatedAt = 999999999999 }, "created_at", "unix milliseconds"},
		// The bounds themselves are valid: the contract's 10^12 (2001-09-09) and
		// this service's own upper one, year 9999's last millisecond.
		{"created_at lowest", func(c *combo.Contribution) { c.CreatedAt = MinCreatedAt }, "", ""},
		{"created_at highest", func(c *combo.Contribution) { c.CreatedAt = MaxCreatedAt }, "", ""},
		// README's bound written out, not through the constant: a constant
		// that drifts (a year 9999 cut a millisecond early) moves with it.
		{"created_at 9999-12-31T23:59:59.999Z", func(c *combo.Contribution) { c.CreatedAt = 253402300799999 }, "", ""},
		{"created_at microseconds", func(c *combo.Contribution) { c.CreatedAt = 1732950000123000 }, "created_at", "year 9999), got 1732950000123000 (that looks like microseconds)"},
		{"created_at nanoseconds", func(c *combo.Contribution) { c.CreatedAt = 1732950000123000000 }, "created_at", "(that looks like nanoseconds)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := good()
			tc.mutate(c)
			err := Contribution(c, "contribution")
			if tc.field == "" {
				if err != nil {
					t.Fatalf("want valid, got %v", err)
				}
				return
			}
			var ve *Error
			if !errors.As(err, &ve) {
				t.Fatalf("want *Error, got %v", err)
			}
			if want := "contribution." + tc.field; ve.Field != want {
				t.Errorf("field = %q, want %q (err %v)", ve.Field, want, err)
			}
			if !strings.Contains(ve.Reason, tc.reason) {
				t.Errorf("reason %q does not contain %q", ve.Reason, tc.reason)
			}
		})
	}
}

func TestContributionNil(t *testing.T) {
	if err := Contribution(nil, "contribution"); err == nil || err.Error() != "contribution: required" {
		t.Fatalf("got %v", err)
	}
}

func TestContributionsNamesIndex(t *testing.T) {
	batch := []*combo.Contribution{good(), good(), good(), good()}
	batch[3].CreatedAt = 1732950000
	err := Contributions(batch)
	want := "contributions[3].created_at: must be unix milliseconds, got 1732950000 (that looks like seconds)"
	if err == nil || err.Error() != want {
		t.Fatalf("got %v, want %s", err, want)
	}
	batch[3] = nil
	if err := Contributions(batch); err == nil || err.Error() != "contributions[3]: required" {
		t.Fatalf("got %v", err)
	}
}

func TestContributionsSize(t *testing.T) {
	if err := Contributions(nil); err == nil || !strings.HasPrefix(err.Error(), "contributions: must hold 1..1000 items, got 0") {
		t.Fatalf("empty: %v", err)
	}
	big := make([]*combo.Contribution, MaxBatch+1)
	for i := range big {
		big[i] = good()
	}
	if err := Contributions(big); err == nil || !strings.Contains(err.Error(), "got 1001") {
		t.Fatalf("too big: %v", err)
	}
	if err := Contributions(big[:MaxBatch]); err != nil {
		t.Fatalf("max size refused: %v", err)
	}
}

func TestMergeLatest(t *testing.T) {
	rec := func() *combo.ContributionRecord {
		return &combo.ContributionRecord{Id: 1, UserId: 2, ItemId: 3, ItemType: "x", Quantity: 1, CreatedAt: 1732950000123}
	}
	cases := []struct {
		name string
		req  *combo.MergeLatestRequest
		want string // "" = valid; else the error's prefix
	}{
		{"valid", &combo.MergeLatestRequest{ActivityId: 1, Records: []*combo.ContributionRecord{rec()}}, ""},
		{"empty records", &combo.MergeLatestRequest{ActivityId: 1}, ""},
		{"nil", nil, "req: required"},
		{"activity", &combo.MergeLatestRequest{ActivityId: 0}, "activity_id: must be > 0"},
		// The contract's bound itself is taken: a gateway polling a full
		// page must not get an empty feed.
		{"at the bound", &combo.MergeLatestRequest{ActivityId: 1, Records: make([]*combo.ContributionRecord, MaxMergeRecords)}, ""},
		{"too many", &combo.MergeLatestRequest{ActivityId: 1, Records: make([]*combo.ContributionRecord, MaxMergeRecords+1)}, "records: must hold at most 10000"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := MergeLatest(tc.req)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("want valid, got %v", err)
				}
				return
			}
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Fatalf("got %v, want prefix %q", err, tc.want)
			}
		})
	}
}

func TestRecord(t *testing.T) {
	if err := Record(1, &combo.ContributionRecord{Id: 1, UserId: 2, ItemId: 3, ItemType: "x", Quantity: 1, CreatedAt: 1732950000123}, 0); err != nil {
		t.Fatal(err)
	}
	if err := Record(1, nil, 1); err == nil || err.Error() != "records[1]: required" {
		t.Fatal(err)
	}
	err := Record(1, &combo.ContributionRecord{Id: 5, UserId: 2, ItemId: 3, ItemType: "x", CreatedAt: 1732950000123}, 1)
	if err == nil || !strings.HasPrefix(err.Error(), "records[1].quantity") {
		t.Fatal(err)
	}
}

// Record judges each column of a DB row by its own rule and names it: a
// column checked against another's bound (item_icon's 2048 bytes against
// item_name's 256) leaves out a row the push path published.
func TestRecordJudgesEachColumnByItsOwnRule(t *testing.T) {
	rec := func() *combo.ContributionRecord {
		return &combo.ContributionRecord{Id: 1, UserId: 2, ItemId: 3, ItemType: "x", Quantity: 1, CreatedAt: 1732950000123}
	}
	cases := []struct {
		name   string
		mutate func(r *combo.ContributionRecord)
		field  string // "" means valid
	}{
		{"item_name at its bound", func(r *combo.ContributionRecord) { r.ItemName = strings.Repeat("n", MaxName) }, ""},
		{"item_icon at its bound", func(r *combo.ContributionRecord) { r.ItemIcon = strings.Repeat("i", MaxURL) }, ""},
		{"nickname at its bound", func(r *combo.ContributionRecord) { r.Nickname = strings.Repeat("n", MaxName) }, ""},
		{"avatar_url at its bound", func(r *combo.ContributionRecord) { r.AvatarUrl = strings.Repeat("u", MaxURL) }, ""},
		{"item_name too long", func(r *combo.ContributionRecord) { r.ItemName = strings.Repeat("n", MaxName+1) }, "item_name"},
		{"item_icon too long", func(r *combo.ContributionRecord) { r.ItemIcon = strings.Repeat("i", MaxURL+1) }, "item_icon"},
		{"nickname too long", func(r *combo.ContributionRecord) { r.Nickname = strings.Repeat("n", MaxName+1) }, "nickname"},
		{"avatar_url too long", func(r *combo.ContributionRecord) { r.AvatarUrl = strings.Repeat("u", MaxURL+1) }, "avatar_url"},
		{"id", func(r *combo.ContributionRecord) { r.Id = 0 }, "id"},
		{"user_id", func(r *combo.ContributionRecord) { r.UserId = 0 }, "user_id"},
		{"star_id", func(r *combo.ContributionRecord) { r.StarId = -1 }, "star_id"},
		{"item_id", func(r *combo.ContributionRecord) { r.ItemId = 0 }, "item_id"},
		{"item_type", func(r *combo.ContributionRecord) { r.ItemType = "" }, "item_type"},
		{"quantity", func(r *combo.ContributionRecord) { r.Quantity = MaxQuantity + 1 }, "quantity"},
		{"created_at", func(r *combo.ContributionRecord) { r.CreatedAt = 1732950000 }, "created_at"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := rec()
			tc.mutate(r)
			err := Record(7, r, 2)
			if tc.field == "" {
				if err != nil {
					t.Fatalf("want valid, got %v", err)
				}
				return
			}
			var ve *Error
			if !errors.As(err, &ve) || ve.Field != "records[2]."+tc.field {
				t.Fatalf("got %v, want an error naming records[2].%s", err, tc.field)
			}
		})
	}
}

func BenchmarkContributions(b *testing.B) {
	batch := make([]*combo.Contribution, 50)
	for i := range batch {
		batch[i] = good()
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := Contributions(batch); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRecords is MergeLatest's validation of a request of 1,000 DB
// rows, as the handler runs it: the request, then Record for each row.
func BenchmarkRecords(b *testing.B) {
	c := good()
	req := &combo.MergeLatestRequest{ActivityId: c.ActivityId, Records: make([]*combo.ContributionRecord, 1000)}
	for i := range req.Records {
		req.Records[i] = &combo.ContributionRecord{Id: int64(i) + 1, UserId: c.UserId, StarId: c.StarId, ItemId: c.ItemId,
			ItemType: c.ItemType, ItemName: c.ItemName, ItemIcon: c.ItemIcon, Nickname: c.Nickname,
			AvatarUrl: c.AvatarUrl, Quantity: c.Quantity, CreatedAt: c.CreatedAt}
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := MergeLatest(req); err != nil {
			b.Fatal(err)
		}
		for i, r := range req.Records {
			if err := Record(req.ActivityId, r, i); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// Just past year 9999 a value is no date since 2001 in microseconds
// (1978), so no unit is guessed.
func TestCreatedAtPastTheBoundGuessesOnlyAPlausibleUnit(t *testing.T) {
	for v, want := range map[int64]string{
		253402300800000: "got 253402300800000",
		// Each unit's guess begins exactly at its power of ten.
		999999999999999:     "got 999999999999999",
		1000000000000000:    "got 1000000000000000 (that looks like microseconds)",
		999999999999999999:  "got 999999999999999999 (that looks like microseconds)",
		1000000000000000000: "got 1000000000000000000 (that looks like nanoseconds)",
		1732950000123000:    "got 1732950000123000 (that looks like microseconds)",
		1732950000123000000: "got 1732950000123000000 (that looks like nanoseconds)",
	} {
		e := createdAt("created_at", v)
		if e == nil || !strings.HasSuffix(e.Reason, want) {
			t.Errorf("created_at %d: %v, want the reason to end %q", v, e, want)
		}
	}
}

// MisreadColumn refuses a page refused alike for a column the caller
// misread (every time in the wrong unit, or every id 0, which no DB row
// holds), naming the first row's field; a page refused for its rows' data
// (a guest's user_id 0, a quantity 0 the DB kept), or for different
// columns, is not the caller's mistake.
func TestMisreadColumn(t *testing.T) {
	const t0 = 1732950000000
	ok := func() *combo.ContributionRecord {
		return &combo.ContributionRecord{Id: 1, UserId: 42, ItemId: 3, ItemType: "rose", Quantity: 1, CreatedAt: t0}
	}
	with := func(f func(*combo.ContributionRecord)) *combo.ContributionRecord {
		r := ok()
		f(r)
		return r
	}
	for _, tc := range []struct {
		name    string
		records []*combo.ContributionRecord
		want    string // error prefix; "" = nil
	}{
		{"no rows", nil, ""},
		{"every time in seconds", []*combo.ContributionRecord{with(func(r *combo.ContributionRecord) { r.CreatedAt = t0 / 1000 }), with(func(r *combo.ContributionRecord) { r.CreatedAt = t0/1000 + 1 })}, "records[0].created_at: must be unix milliseconds"},
		{"every id unset", []*combo.ContributionRecord{with(func(r *combo.ContributionRecord) { r.Id = 0 }), with(func(r *combo.ContributionRecord) { r.Id = 0 })}, "records[0].id: must be > 0, got 0 in every row"},
		{"every user_id 0: a guest's gifts the DB holds", []*combo.ContributionRecord{with(func(r *combo.ContributionRecord) { r.UserId = 0 })}, ""},
		{"every item_id 0", []*combo.ContributionRecord{with(func(r *combo.ContributionRecord) { r.ItemId = 0 })}, ""},
		{"every item_type empty", []*combo.ContributionRecord{with(func(r *combo.ContributionRecord) { r.ItemType = "" })}, ""},
		{"every quantity 0", []*combo.ContributionRecord{with(func(r *combo.ContributionRecord) { r.Quantity = 0 })}, ""},
		{"every item_type too long: data, not a column unread", []*combo.ContributionRecord{with(func(r *combo.ContributionRecord) { r.ItemType = strings.Repeat("玫", 22) })}, ""},
		{"ids unset in some rows only", []*combo.ContributionRecord{with(func(r *combo.ContributionRecord) { r.Id = 0 }), with(func(r *combo.ContributionRecord) { r.Quantity = 0 })}, ""},
		{"a nil row", []*combo.ContributionRecord{nil, with(func(r *combo.ContributionRecord) { r.Id = 0 })}, ""},
		// A negative id was read (it is data no report had), not left unread:
		// "got 0 in every row" would be untrue.
		{"every id negative", []*combo.ContributionRecord{with(func(r *combo.ContributionRecord) { r.Id = -1 }), with(func(r *combo.ContributionRecord) { r.Id = -2 })}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := MisreadColumn(tc.records)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("got %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.want)):
				t.Fatalf("got %v, want %q...", err, tc.want)
			}
		})
	}
}
