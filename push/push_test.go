package push

import (
	"bytes"
	"encoding/json"
	"math"
	"path"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/combo-service/combo-service/kitex_gen/combo"
)

func sample() *combo.Contribution {
	return &combo.Contribution{Id: math.MaxInt64, ActivityId: 7, UserId: 1<<53 + 1, StarId: 0, ItemId: 3,
		ItemType: `a"b\c{}: 烟花`, ItemName: "<烟花>", ItemIcon: "https://cdn/i.png?a=1&b=2", Nickname: "小明\n\"q\" \\",
		AvatarUrl: "", Quantity: 3, CreatedAt: 1732950000123}
}

func TestSingleHasEveryMemberExact(t *testing.T) {
	b, err := Single(sample())
	if err != nil {
		t.Fatal(err)
	}
	m, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	want := RecordOf(sample())
	if m.Record != want || m.ActivityID != 7 || m.Type != Type {
		t.Fatalf("decoded %+v, want %+v", m, want)
	}
	for _, exact := range []string{`"id":9223372036854775807`, `"user_id":9007199254740993`, `"star_id":0`, `"avatar_url":""`} {
		if !strings.Contains(string(b), exact) {
			t.Errorf("payload lacks %s: %s", exact, b)
		}
	}
}

// The flush script splits the fragment on FragmentSep and names its six
// values; each must be a valid JSON value even when strings hold quotes,
// backslashes, control characters or CJK.
func TestFragmentValuesAreJSON(t *testing.T) {
	c := sample()
	f, err := Fragment(c)
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(string(f), FragmentSep)
	if len(parts) != 6 {
		t.Fatalf("%d values in %q", len(parts), f)
	}
	want := []any{float64(c.StarId), float64(c.ItemId), c.Nickname, c.AvatarUrl, c.ItemName, c.ItemIcon}
	for i, p := range parts {
		if i >= 2 {
			p = `"` + p + `"` // the flush script adds the quotes
		}
		var v any
		if err := json.Unmarshal([]byte(p), &v); err != nil {
			t.Fatalf("value %d %q: %v", i, p, err)
		}
		if v != want[i] {
			t.Errorf("value %d = %v, want %v", i, v, want[i])
		}
	}
	if got := JSONString(`a"b\c`); got != `"a\"b\\c"` {
		t.Errorf("JSONString = %s", got)
	}
}

func TestDecodeRefusesMissingMember(t *testing.T) {
	if _, err := Decode([]byte(`{"activity_id":1,"type":"contributions_response","record":{"id":1}}`)); err == nil {
		t.Fatal("a record without its members must not decode")
	}
}

func TestChannel(t *testing.T) {
	if Channel(42) != "act:42:contributions" {
		t.Fatal(Channel(42))
	}
	// The subscribers' pattern takes every activity's channel and no other
	// (path.Match's glob agrees with Redis's on these).
	for ch, want := range map[string]bool{Channel(42): true, Channel(1 << 62): true, "act:42:other": false, "act:42": false} {
		if got, _ := path.Match(ChannelPattern, ch); got != want {
			t.Errorf("%s matches %s: %v, want %v", ChannelPattern, ch, got, want)
		}
	}
}

// Decode refuses a member of the wrong JSON type, as it refuses a missing
// one: a producer that quoted an integer (or wrote a fraction, or one past
// int64) would otherwise decode as 0, every member still present.
func TestDecodeRefusesWrongTypedMember(t *testing.T) {
	good, err := Single(sample())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ from, to string }{
		{`"activity_id":7`, `"activity_id":"7"`},
		{`"id":9223372036854775807`, `"id":"9223372036854775807"`},
		{`"id":9223372036854775807`, `"id":9223372036854775808`},
		{`"quantity":3`, `"quantity":3.5`},
		{`"quantity":3`, `"quantity":2147483648`},
		{`"created_at":1732950000123`, `"created_at":1.732950000123e12`},
		{`"nickname":"`, `"nickname":1,"x":"`},
		{`"type":"contributions_response"`, `"type":1`},
	} {
		if !bytes.Contains(good, []byte(tc.from)) {
			t.Fatalf("%s not in %s", tc.from, good)
		}
		bad := bytes.Replace(good, []byte(tc.from), []byte(tc.to), 1)
		if _, err := Decode(bad); err == nil {
			t.Errorf("Decode(%s) = nil error, want a refusal of %s", bad, tc.to)
		}
	}
}

// BenchmarkFragment: "typical" is a row whose strings need no escaping (the
// common case), "escapes" one where three of four do.
func BenchmarkFragment(b *testing.B) {
	typical := &combo.Contribution{StarId: 12, ItemId: 8, Nickname: "小明", AvatarUrl: "https://cdn.example.com/avatars/1000000.jpg",
		ItemName: "烟花", ItemIcon: "https://cdn.example.com/items/gift.png"}
	for name, c := range map[string]*combo.Contribution{"typical": typical, "escapes": sample()} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Fragment(c); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkSingle(b *testing.B) {
	c := sample()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Single(c); err != nil {
			b.Fatal(err)
		}
	}
}

// The fast path of Fragment (no json.Marshal when nothing needs escaping)
// writes exactly the bytes encoding/json would.
func FuzzFragmentMatchesEncodingJSON(f *testing.F) {
	for _, s := range []string{"", "小明", "https://cdn.example.com/a.png?x=1&y=2", `a"b\c`, "<b>", "\u2028", "\u2029",
		"\xe2\x82\xac", "tab\there", "\x7f", "\xff", "é",
		// Each HTML character alone: "<b>" is escaped for either of its two.
		"<", ">", "&"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c := sample()
		c.Nickname, c.AvatarUrl, c.ItemName, c.ItemIcon = s, s+"x", "y"+s, s+s
		got, err := Fragment(c)
		if err != nil {
			t.Fatal(err)
		}
		want := strconv.FormatInt(c.StarId, 10) + FragmentSep + strconv.FormatInt(c.ItemId, 10)
		for _, v := range []string{c.Nickname, c.AvatarUrl, c.ItemName, c.ItemIcon} {
			enc, _ := json.Marshal(v)
			want += FragmentSep + string(enc[1:len(enc)-1])
		}
		if string(got) != want {
			t.Fatalf("Fragment(%q) = %q, want %q", s, got, want)
		}
	})
}

// RecordOf must map each contribution field to its own record member:
// every field gets a distinct value, so a swap or a constant shows.
func TestRecordOfMapsEveryFieldToItsOwnMember(t *testing.T) {
	c := &combo.Contribution{Id: 11, ActivityId: 12, UserId: 13, StarId: 14, ItemId: 15,
		ItemType: "type", ItemName: "name", ItemIcon: "icon", Nickname: "nick", AvatarUrl: "avatar",
		Quantity: 7, CreatedAt: 1732950000123}
	want := Record{ID: 11, UserID: 13, Nickname: "nick", AvatarURL: "avatar", StarID: 14, ItemID: 15,
		ItemType: "type", ItemName: "name", ItemIcon: "icon", Quantity: 7, ComboCount: 7, CreatedAt: 1732950000123}
	if got := RecordOf(c); got != want {
		t.Fatalf("RecordOf = %+v, want %+v", got, want)
	}
	b, err := Single(c)
	if err != nil {
		t.Fatal(err)
	}
	const exact = `{"activity_id":12,"type":"contributions_response","record":{"id":11,"user_id":13,"nickname":"nick",` +
		`"avatar_url":"avatar","star_id":14,"item_id":15,"item_type":"type","item_name":"name","item_icon":"icon",` +
		`"quantity":7,"combo_count":7,"created_at":1732950000123}}`
	if string(b) != exact {
		t.Fatalf("Single = %s\nwant     %s", b, exact)
	}
}

// Decode refuses what a producer must never send: a message without its
// activity_id or type, and a record member that is null or missing, each
// for its own reason. The map round trip keeps numbers exact (UseNumber):
// through float64, sample()'s id (MaxInt64) no longer fit an int64, and
// every variant was refused by json.Unmarshal, whatever Decode checked.
func TestDecodeRefusesEachMissingOrNullMemberForItsReason(t *testing.T) {
	good, err := Single(sample())
	if err != nil {
		t.Fatal(err)
	}
	load := func() map[string]any {
		d := json.NewDecoder(bytes.NewReader(good))
		d.UseNumber()
		var m map[string]any
		if err := d.Decode(&m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	unchanged, _ := json.Marshal(load())
	if _, err := Decode(unchanged); err != nil {
		t.Fatalf("a producer's own message, round-tripped: %v", err)
	}
	type variant struct {
		change func(map[string]any)
		want   string // in the error
	}
	variants := map[string]variant{
		"no activity_id":   {func(m map[string]any) { delete(m, "activity_id") }, "no activity_id"},
		"null activity_id": {func(m map[string]any) { m["activity_id"] = nil }, "no activity_id"},
		"no type":          {func(m map[string]any) { delete(m, "type") }, `, want "` + Type + `"`},
		"other type":       {func(m map[string]any) { m["type"] = "other" }, `, want "` + Type + `"`},
		"no record":        {func(m map[string]any) { delete(m, "record") }, "no record"},
	}
	for _, k := range RecordKeys {
		variants["null "+k] = variant{func(m map[string]any) { m["record"].(map[string]any)[k] = nil }, `"` + k + `"`}
		variants["no "+k] = variant{func(m map[string]any) { delete(m["record"].(map[string]any), k) }, `"` + k + `"`}
	}
	for name, v := range variants {
		m := load()
		v.change(m)
		b, _ := json.Marshal(m)
		_, err := Decode(b)
		if err == nil || !strings.Contains(err.Error(), v.want) {
			t.Errorf("%s: Decode(%s) = %v, want an error naming %s", name, b, err, v.want)
		}
	}
}

// RecordKeys, which Decode requires, are Record's JSON names in order (the
// 12 members of CONTRACT §3's record): a key missing from both passed
// every test that decodes with Decode.
func TestRecordKeysAreRecordsJSONNames(t *testing.T) {
	var tags []string
	rt := reflect.TypeFor[Record]()
	for field := range rt.Fields() {
		tags = append(tags, field.Tag.Get("json"))
	}
	contract := []string{"id", "user_id", "nickname", "avatar_url", "star_id", "item_id",
		"item_type", "item_name", "item_icon", "quantity", "combo_count", "created_at"}
	if !slices.Equal(tags, RecordKeys) || !slices.Equal(tags, contract) {
		t.Fatalf("Record's JSON names %q, RecordKeys %q, want both CONTRACT's %q", tags, RecordKeys, contract)
	}
}
