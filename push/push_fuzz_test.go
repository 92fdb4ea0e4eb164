package push

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/combo-service/combo-service/kitex_gen/combo"
)

// asJSON is what a JSON reader gets back of s: encoding/json writes each
// byte of invalid UTF-8 as U+FFFD, as a conversion to runes reads it.
func asJSON(s string) string { return string([]rune(s)) }

// FuzzFragment: a fragment has exactly six values whatever its strings
// hold, the ids read back as integers, and each string, in the quotes the
// flush script puts around it, is a JSON string of the value put in.
func FuzzFragment(f *testing.F) {
	f.Add(int64(0), int64(3), "小明\n", "", "<烟花>", "https://cdn/i.png?a=1&b=2")
	f.Add(int64(-1), int64(9223372036854775807), "\x1f\x1f", "\"\\", "\u2028\u2029", "\xe2\x80")
	f.Add(int64(1), int64(1), "\xff\xfe", "}{:", "\x7f", strings.Repeat("礼", 80))
	// Each character that needs escaping alone in its string: with two in
	// one seed, escaping one of them only still passed.
	f.Add(int64(2), int64(2), `"`, `\`, "<", ">")
	f.Add(int64(3), int64(3), "&", "\x01", "\u2028", "\xc3")
	f.Fuzz(func(t *testing.T, star, item int64, nick, avatar, name, icon string) {
		c := &combo.Contribution{StarId: star, ItemId: item, Nickname: nick, AvatarUrl: avatar, ItemName: name, ItemIcon: icon}
		b, err := Fragment(c)
		if err != nil {
			t.Fatal(err)
		}
		parts := strings.Split(string(b), FragmentSep)
		if len(parts) != 6 {
			t.Fatalf("%d values in %q", len(parts), b)
		}
		for i, want := range []int64{star, item} {
			if got, err := strconv.ParseInt(parts[i], 10, 64); err != nil || got != want {
				t.Fatalf("value %d %q, want %d", i, parts[i], want)
			}
		}
		for i, want := range []string{nick, avatar, name, icon} {
			var got string
			if err := json.Unmarshal([]byte(`"`+parts[i+2]+`"`), &got); err != nil || got != asJSON(want) {
				t.Fatalf("value %d %q reads as %q (%v), want %q", i+2, parts[i+2], got, err, asJSON(want))
			}
		}
	})
}

// FuzzSingle: the degraded path's message decodes back to the record put
// in, with every member present.
func FuzzSingle(f *testing.F) {
	s := sample()
	f.Add(s.Id, s.ActivityId, s.UserId, s.ItemType, s.Nickname, s.ItemIcon, s.Quantity)
	f.Add(int64(-1), int64(0), int64(1<<53+1), "\xff", "\u2028", "\x00\x1f", int32(-7))
	f.Fuzz(func(t *testing.T, id, activity, user int64, itemType, nick, icon string, qty int32) {
		c := &combo.Contribution{Id: id, ActivityId: activity, UserId: user, StarId: user ^ id, ItemId: id ^ 5,
			ItemType: itemType, ItemName: icon + nick, ItemIcon: icon, Nickname: nick, AvatarUrl: itemType + icon,
			Quantity: qty, CreatedAt: id - user}
		b, err := Single(c)
		if err != nil {
			t.Fatal(err)
		}
		m, err := Decode(b)
		if err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		want := RecordOf(c)
		want.ItemType, want.ItemName, want.ItemIcon = asJSON(want.ItemType), asJSON(want.ItemName), asJSON(want.ItemIcon)
		want.Nickname, want.AvatarURL = asJSON(want.Nickname), asJSON(want.AvatarURL)
		if m.Record != want || m.ActivityID != activity || m.Type != Type {
			t.Fatalf("decoded %+v, want %+v", m, want)
		}
		var js string
		if err := json.Unmarshal([]byte(JSONString(itemType)), &js); err != nil || js != asJSON(itemType) {
			t.Fatalf("JSONString(%q) reads as %q (%v)", itemType, js, err)
		}
	})
}

// FuzzDecode: any bytes are decoded or refused, never a panic, and what
// is decoded had every record member.
func FuzzDecode(f *testing.F) {
	b, _ := Single(sample())
	f.Add(b)
	f.Add([]byte(`{"activity_id":1,"type":"contributions_response","record":{"id":1}}`))
	f.Add([]byte(`{"record":null}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if _, err := Decode(b); err != nil {
			return
		}
		var raw struct{ Record map[string]json.RawMessage }
		if err := json.Unmarshal(b, &raw); err != nil {
			t.Fatalf("decoded %q, which is not JSON: %v", b, err)
		}
		for _, k := range RecordKeys {
			if _, ok := raw.Record[k]; !ok {
				t.Fatalf("decoded %q, whose record has no %q", b, k)
			}
		}
	})
}
