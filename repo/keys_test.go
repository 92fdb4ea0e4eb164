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
