// Package validate checks RPC input against CONTRACT.md §1 before anything is
// written. Every error names the offending field with its full path (for
// example "contributions[3].created_at") so a caller can fix its row without
// reading our source.
package validate

import (
	"fmt"
	"slices"
	"unicode"
	"unicode/utf8"

	"github.com/combo-service/combo-service/kitex_gen/combo"
)

// Limits from CONTRACT.md §1.
const (
	MaxBatch        = 1000
	MaxMergeRecords = 10000
	MaxItemType     = 64
	MaxName         = 256
	MaxURL          = 2048
	MaxQuantity     = 1000000

	// MinCreatedAt is the smallest created_at accepted: 2001-09-09 in unix
	// milliseconds. Anything below it is almost surely seconds, the mistake
	// the contract asks us to name.
	MinCreatedAt = 1000000000000
	// MaxCreatedAt is 9999-12-31T23:59:59.999Z. Anything above it is almost
	// surely microseconds or nanoseconds, the mirror of the seconds mistake
	// above, which would otherwise open a window far in the future on every
	// report; it also keeps window arithmetic (anchor + W) far from int64
	// overflow.
	MaxCreatedAt = 253402300799999
)

// Error is a refused input: Field is the path of the bad value.
type Error struct {
	Field  string
	Reason string
}

func (e *Error) Error() string { return e.Field + ": " + e.Reason }

func fail(field, format string, args ...any) *Error {
	return &Error{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// Contribution checks one reported row; field is its path in the request
// ("contribution" or "contributions[3]").
func Contribution(c *combo.Contribution, field string) error {
	if e := check(c); e != nil {
		return e.under(field)
	}
	return nil
}

// under roots a relative error at the path prefix; building the path only on
// failure keeps the valid path free of allocations.
func (e *Error) under(prefix string) *Error {
	if e.Field == "" {
		e.Field = prefix
	} else {
		e.Field = prefix + "." + e.Field
	}
	return e
}

// check returns an error whose Field is relative to the row ("" for the row).
func check(c *combo.Contribution) *Error {
	if c == nil {
		return fail("", "required")
	}
	switch {
	case c.Id <= 0:
		return fail("id", "must be > 0, got %d", c.Id)
	case c.ActivityId <= 0:
		return fail("activity_id", "must be > 0, got %d", c.ActivityId)
	case c.UserId <= 0:
		return fail("user_id", "must be > 0, got %d", c.UserId)
	case c.StarId < 0:
		return fail("star_id", "must be >= 0, got %d", c.StarId)
	case c.ItemId <= 0:
		return fail("item_id", "must be > 0, got %d", c.ItemId)
	}
	if err := itemType("item_type", c.ItemType); err != nil {
		return err
	}
	if err := text("item_name", c.ItemName, MaxName); err != nil {
		return err
	}
	if err := text("item_icon", c.ItemIcon, MaxURL); err != nil {
		return err
	}
	if err := text("nickname", c.Nickname, MaxName); err != nil {
		return err
	}
	if err := text("avatar_url", c.AvatarUrl, MaxURL); err != nil {
		return err
	}
	if c.Quantity < 1 || c.Quantity > MaxQuantity {
		return fail("quantity", "must be 1..%d, got %d", MaxQuantity, c.Quantity)
	}
	return createdAt("created_at", c.CreatedAt)
}

// Contributions checks a whole batch; one bad item refuses all of it.
func Contributions(cs []*combo.Contribution) error {
	if len(cs) == 0 || len(cs) > MaxBatch {
		return fail("contributions", "must hold 1..%d items, got %d", MaxBatch, len(cs))
	}
	for i, c := range cs {
		if e := check(c); e != nil {
			return e.under(fmt.Sprintf("contributions[%d]", i))
		}
	}
	return nil
}

// MergeLatest checks a poll-path merge request as a whole: the activity and
// the number of records. Single records are judged by Record.
func MergeLatest(req *combo.MergeLatestRequest) error {
	if req == nil {
		return fail("req", "required")
	}
	if req.ActivityId <= 0 {
		return fail("activity_id", "must be > 0, got %d", req.ActivityId)
	}
	if len(req.Records) > MaxMergeRecords {
		return fail("records", "must hold at most %d items, got %d", MaxMergeRecords, len(req.Records))
	}
	return nil
}

// Record checks one DB row given to MergeLatest by the rules its report
// met: a row the push path refused is one MergeLatest leaves out, so both
// paths show the same feed. i is its index in records; the error's path is
// built only on failure.
func Record(activityID int64, r *combo.ContributionRecord, i int) error {
	if r == nil {
		return fail(fmt.Sprintf("records[%d]", i), "required")
	}
	if e := check(&combo.Contribution{
		Id: r.Id, ActivityId: activityID, UserId: r.UserId, StarId: r.StarId,
		ItemId: r.ItemId, ItemType: r.ItemType, ItemName: r.ItemName, ItemIcon: r.ItemIcon,
		Nickname: r.Nickname, AvatarUrl: r.AvatarUrl, Quantity: r.Quantity, CreatedAt: r.CreatedAt,
	}); e != nil {
		return e.under(fmt.Sprintf("records[%d]", i))
	}
	return nil
}

// MisreadColumn returns an error naming the first record's field when
// every record is refused alike for a column the caller misread: every
// created_at refused (read in seconds or microseconds), or every id 0
// (not read at all: a DB row's id is never 0). An empty feed would hide
// that mistake. Rows refused for their data are not the caller's mistake
// and are merely left out: a nickname the DB kept and the report refused,
// or a user_id or quantity of 0, which a DB may well hold (a guest's gift)
// and the push path refused too: it returns nil.
func MisreadColumn(records []*combo.ContributionRecord) error {
	if len(records) == 0 || slices.Contains(records, nil) {
		return nil
	}
	if every(records, func(r *combo.ContributionRecord) bool { return createdAt("created_at", r.CreatedAt) != nil }) {
		return createdAt("created_at", records[0].CreatedAt).under("records[0]")
	}
	if every(records, func(r *combo.ContributionRecord) bool { return r.Id == 0 }) {
		return fail("id", "must be > 0, got 0 in every row: is the column read?").under("records[0]")
	}
	return nil
}

func every(records []*combo.ContributionRecord, f func(*combo.ContributionRecord) bool) bool {
	for _, r := range records {
		if !f(r) {
			return false
		}
	}
	return true
}

// itemType checks the combo key's free-text part. Any byte that is valid
// UTF-8 and not a control character is allowed (':', '{', '}', spaces, CJK):
// keys are built so none of them can collide or escape a hash tag.
func itemType(field, v string) *Error {
	if len(v) < 1 || len(v) > MaxItemType {
		return fail(field, "must be 1..%d bytes, got %d", MaxItemType, len(v))
	}
	if !utf8.ValidString(v) {
		return fail(field, "must be valid UTF-8")
	}
	for i, r := range v {
		if unicode.IsControl(r) {
			return fail(field, "must not contain control characters, found %U at byte %d", r, i)
		}
	}
	return nil
}

// createdAt checks a unix-millisecond timestamp and says so when the caller
// sent seconds, the most likely mistake.
func createdAt(field string, v int64) *Error {
	if v < MinCreatedAt {
		if v >= 1000000000 && v < 100000000000 {
			return fail(field, "must be unix milliseconds, got %d (that looks like seconds)", v)
		}
		return fail(field, "must be unix milliseconds >= %d, got %d", int64(MinCreatedAt), v)
	}
	if v > MaxCreatedAt {
		// Name a unit only where the value would be a date since 2001 in
		// it: just past the bound it would be 1978 in microseconds.
		switch {
		case v >= 1e18:
			return fail(field, "must be unix milliseconds <= %d (year 9999), got %d (that looks like nanoseconds)", int64(MaxCreatedAt), v)
		case v >= 1e15:
			return fail(field, "must be unix milliseconds <= %d (year 9999), got %d (that looks like microseconds)", int64(MaxCreatedAt), v)
		}
		return fail(field, "must be unix milliseconds <= %d (year 9999), got %d", int64(MaxCreatedAt), v)
	}
	return nil
}

func text(field, v string, max int) *Error {
	if len(v) > max {
		return fail(field, "must be at most %d bytes, got %d", max, len(v))
	}
	if !utf8.ValidString(v) {
		return fail(field, "must be valid UTF-8")
	}
	return nil
}
