package repo_test

import (
	"strings"
	"testing"

	"github.com/combo-service/combo-service/repo"
)

// The stream entry's combo key reads back exactly, whatever bytes the item
// type holds, and is what follows ":w:" in the window key.
func TestEntryComboKeyRoundTrip(t *testing.T) {
	keys := repo.NewKeys(4)
	for _, itemType := range []string{"rose", "a:b", ":w:", "crown:{gold} 1", "超级火箭", "1:2:3"} {
		s := repo.EntryComboKey(7, 9223372036854775807, itemType)
		a, u, it, err := repo.ParseEntryComboKey(s)
		if err != nil || a != 7 || u != 9223372036854775807 || it != itemType {
			t.Fatalf("%q -> %d %d %q %v", s, a, u, it, err)
		}
		shard := keys.Shard(7, 9223372036854775807, itemType)
		if cur := keys.Current(shard, 7, 9223372036854775807, itemType); !strings.HasSuffix(cur, ":w:"+s) ||
			strings.Index(cur, ":w:") != len(cur)-len(s)-3 {
			t.Fatalf("window key %q does not end in the first \":w:\" + %q", cur, s)
		}
	}
	for _, bad := range []string{"", "7:9:4", "7:9:5:rose", "x:9:4:rose", "7:y:4:rose", "7:9:z:rose"} {
		if _, _, _, err := repo.ParseEntryComboKey(bad); err == nil {
			t.Fatalf("%q parsed", bad)
		}
	}
}

// BenchmarkKeys measures building a report's keys: the shard of its combo
// key and the window key, once per report on the request path.
//
//	go test -run '^$' -bench Keys -benchmem ./repo/
func BenchmarkKeys(b *testing.B) {
	k := repo.NewKeys(16)
	b.ReportAllocs()
	for i := range b.N {
		s := k.Shard(1001, int64(i%1024), "烟花 firework")
		_ = k.Current(s, 1001, int64(i%1024), "烟花 firework")
	}
}

// A combo key's shard is FNV-1a 32 of "activity\x00user\x00item_type"
// modulo redis.shards, pinned to values computed outside Go: replicas of
// two versions in a rolling upgrade must place a key on the same shard, or
// one window would be open on two shards and pushed twice.
func TestShardPlacementIsStable(t *testing.T) {
	for _, c := range []struct {
		shards   int
		activity int64
		user     int64
		itemType string
		want     int
	}{
		{2, 7, 42, "rose", 1}, {4, 7, 42, "rose", 3}, {16, 7, 42, "rose", 7}, {64, 7, 42, "rose", 23},
		{16, 1001, 1, "fireworks", 2}, {64, 1001, 1, "fireworks", 50},
		{16, -5, 9007199254740993, "火箭", 8}, {64, -5, 9007199254740993, "火箭", 40},
		{16, 1, 23, "", 9}, {1, 7, 42, "rose", 0},
	} {
		if got := repo.NewKeys(c.shards).Shard(c.activity, c.user, c.itemType); got != c.want {
			t.Errorf("%d shards: key (%d, %d, %q) on shard %d, want %d", c.shards, c.activity, c.user, c.itemType, got, c.want)
		}
	}
}
