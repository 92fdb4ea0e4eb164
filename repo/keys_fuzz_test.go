package repo

import (
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// hashTag is the part of key Redis Cluster hashes: what is between the
// first '{' and the first '}' after it, if that is not empty.
func hashTag(key string) string {
	i := strings.IndexByte(key, '{')
	if i < 0 {
		return key
	}
	j := strings.IndexByte(key[i+1:], '}')
	if j <= 0 {
		return key
	}
	return key[i+1 : i+1+j]
}

// FuzzEntryComboKey: a combo key built here reads back exactly, whatever
// the item type holds (':', '{', '}', "\x1f", ":w:", CJK, any bytes), the
// window key ends in it after its first ":w:" (where the report script
// cuts it), and every key of the window shares its stream's hash tag.
func FuzzEntryComboKey(f *testing.F) {
	f.Add(int64(7), int64(42), "rose", 4)
	f.Add(int64(1), int64(9223372036854775807), "a:b:{0}:w:\x1f}", 1)
	f.Add(int64(-1), int64(0), "", 16)
	f.Add(int64(9223372036854775807), int64(-9223372036854775808), strings.Repeat("超级火箭", 5)+"{", 3)
	f.Add(int64(12), int64(3), "1:2:3", 2)
	f.Fuzz(func(t *testing.T, a, u int64, itemType string, shards int) {
		s := EntryComboKey(a, u, itemType)
		ga, gu, gt, err := ParseEntryComboKey(s)
		if err != nil || ga != a || gu != u || gt != itemType {
			t.Fatalf("EntryComboKey(%d, %d, %q) = %q reads back as %d %d %q %v", a, u, itemType, s, ga, gu, gt, err)
		}
		keys := NewKeys(shards%64 + 1)
		shard := keys.Shard(a, u, itemType)
		if shard < 0 || shard >= keys.Shards() {
			t.Fatalf("shard %d of %d", shard, keys.Shards())
		}
		cur := keys.Current(shard, a, u, itemType)
		if _, after, ok := strings.Cut(cur, ":w:"); !ok || after != s {
			t.Fatalf("window key %q: after its first \":w:\" is not %q", cur, s)
		}
		tag := hashTag(keys.Stream(shard))
		for _, k := range []string{cur, keys.Parked(shard, "1-1"), keys.SeenPrefix(shard) + "9:1", keys.Probe(shard)} {
			if got := hashTag(k); got != tag {
				t.Fatalf("key %q hashes on %q, its stream on %q", k, got, tag)
			}
		}
	})
}

// FuzzParseEntry: a stream entry of any bytes is read or refused, never a
// panic, and what is read names a window key that reads back the same.
func FuzzParseEntry(f *testing.F) {
	f.Add("1732950000000-0", "7:42:4:rose", true)
	f.Add("1-1", "7:42:5:rose", true)
	f.Add("x", "", false)
	f.Add("18446744073709551615-0", "-1:+2:03:a:b", true)
	f.Add("1732950000000-0", "7:42:-1:", true)
	f.Fuzz(func(t *testing.T, id, k string, hasK bool) {
		r := &Repo{delay: 1200 * time.Millisecond}
		m := redis.XMessage{ID: id, Values: map[string]any{}}
		if hasK {
			m.Values["k"] = k
		}
		w, err := r.parseEntry(0, m)
		if err != nil {
			return
		}
		a, u, it, err := ParseEntryComboKey(EntryComboKey(w.ActivityID, w.UserID, w.ItemType))
		if err != nil || a != w.ActivityID || u != w.UserID || it != w.ItemType {
			t.Fatalf("entry %q read as %+v, whose key reads back as %d %d %q %v", k, w, a, u, it, err)
		}
	})
}
