// Package push is the wire format of what combo-service publishes: one JSON
// message per closed window on the pub/sub channel act:{activity_id}:contributions
// (CONTRACT.md §3). The gateway, the demo and the benchmark decode it with
// these types; the service encodes it with Fragment and Single.
package push

import (
	"encoding/json"
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/combo-service/combo-service/kitex_gen/combo"
)

// Type is the message's "type" value.
const Type = "contributions_response"

// ChannelPattern matches every activity's channel (PSUBSCRIBE).
const ChannelPattern = "act:*:contributions"

// Channel is the pub/sub channel of one activity.
func Channel(activityID int64) string {
	return "act:" + strconv.FormatInt(activityID, 10) + ":contributions"
}

// Message is one push.
type Message struct {
	ActivityID int64  `json:"activity_id"`
	Type       string `json:"type"`
	Record     Record `json:"record"`
}

// Record is one merged feed item. Every field is always present (no
// omitempty): the frontend reads them without checks. encoding/json writes
// int64 as exact JSON integers.
type Record struct {
	ID         int64  `json:"id"`
	UserID     int64  `json:"user_id"`
	Nickname   string `json:"nickname"`
	AvatarURL  string `json:"avatar_url"`
	StarID     int64  `json:"star_id"`
	ItemID     int64  `json:"item_id"`
	ItemType   string `json:"item_type"`
	ItemName   string `json:"item_name"`
	ItemIcon   string `json:"item_icon"`
	Quantity   int32  `json:"quantity"`
	ComboCount int32  `json:"combo_count"`
	CreatedAt  int64  `json:"created_at"`
}

// FragmentSep separates the values of a Fragment. JSON escapes every
// control character inside strings, so it can never occur within a value.
const FragmentSep = "\x1f"

// Fragment returns the display values of c's record — star_id, item_id and
// the JSON-escaped contents (without quotes) of nickname, avatar_url,
// item_name and item_icon — joined by FragmentSep, without member names. The report script keeps the
// smallest-id row's fragment and the flush script names the values and
// completes the record, so string escaping is done once, here, by
// encoding/json, never in Lua, and Redis stores no member names or quotes
// per window (bytes that count: a window is kept for seconds, many at once).
func Fragment(c *combo.Contribution) ([]byte, error) {
	b := make([]byte, 0, 48+len(c.Nickname)+len(c.AvatarUrl)+len(c.ItemName)+len(c.ItemIcon))
	b = strconv.AppendInt(b, c.StarId, 10)
	b = append(b, FragmentSep...)
	b = strconv.AppendInt(b, c.ItemId, 10)
	for _, s := range [...]string{c.Nickname, c.AvatarUrl, c.ItemName, c.ItemIcon} {
		b = append(b, FragmentSep...)
		if !needsEscape(s) {
			b = append(b, s...)
			continue
		}
		enc, err := json.Marshal(s)
		if err != nil {
			return nil, err
		}
		b = append(b, enc[1:len(enc)-1]...)
	}
	return b, nil
}

// needsEscape reports whether encoding/json would write s other than byte
// for byte between its quotes: control characters, '"', '\', the HTML
// characters it escapes, U+2028/U+2029 (which start with 0xE2) and invalid
// UTF-8 (the service validates UTF-8 first, but this must not depend on
// it). Most display strings (URLs, names) need nothing, and skipping
// json.Marshal for them saves its reflection on every report.
func needsEscape(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20, c == '"', c == '\\', c == '<', c == '>', c == '&', c == 0xE2:
			return true
		}
	}
	return !utf8.ValidString(s)
}

// JSONString is s as a JSON string literal (for the flush script's item_type).
func JSONString(s string) string {
	b, _ := json.Marshal(s) // a Go string always encodes
	return string(b)
}

// RecordOf is the feed item of one contribution on its own.
func RecordOf(c *combo.Contribution) Record {
	return Record{
		ID: c.Id, UserID: c.UserId, Nickname: c.Nickname, AvatarURL: c.AvatarUrl, StarID: c.StarId,
		ItemID: c.ItemId, ItemType: c.ItemType, ItemName: c.ItemName, ItemIcon: c.ItemIcon,
		Quantity: c.Quantity, ComboCount: c.Quantity, CreatedAt: c.CreatedAt,
	}
}

// Single is the message for one contribution published on its own: the
// degraded path, when aggregation failed but Redis still answers.
func Single(c *combo.Contribution) ([]byte, error) {
	return json.Marshal(Message{ActivityID: c.ActivityId, Type: Type, Record: RecordOf(c)})
}

// Decode parses one pushed message strictly, as the tests' check of every
// producer: activity_id, type (Type) and record, and every record member,
// must be present and not null, so a consumer notices a producer that drops
// or nulls fields.
func Decode(payload []byte) (Message, error) {
	var m Message
	if err := json.Unmarshal(payload, &m); err != nil {
		return Message{}, fmt.Errorf("push.Decode: %w", err)
	}
	var raw struct {
		ActivityID json.RawMessage            `json:"activity_id"`
		Type       json.RawMessage            `json:"type"`
		Record     map[string]json.RawMessage `json:"record"`
	}
	if err := json.Unmarshal(payload, &raw); err != nil {
		return Message{}, fmt.Errorf("push.Decode: %w", err)
	}
	absent := func(v json.RawMessage) bool { return v == nil || string(v) == "null" }
	switch {
	case absent(raw.ActivityID):
		return Message{}, fmt.Errorf("push.Decode: no activity_id")
	case m.Type != Type:
		return Message{}, fmt.Errorf("push.Decode: type %q, want %q", m.Type, Type)
	case raw.Record == nil:
		return Message{}, fmt.Errorf("push.Decode: no record")
	}
	for _, k := range RecordKeys {
		if absent(raw.Record[k]) {
			return Message{}, fmt.Errorf("push.Decode: record has no %q", k)
		}
	}
	return m, nil
}

// RecordKeys are the 12 members every pushed record carries.
var RecordKeys = []string{"id", "user_id", "nickname", "avatar_url", "star_id", "item_id",
	"item_type", "item_name", "item_icon", "quantity", "combo_count", "created_at"}
