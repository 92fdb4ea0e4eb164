package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/combo-service/combo-service/repo"
)

// memoryResult is Redis memory per open window. It only means something
// while the windows are open: run the service with a window long enough
// (COMBO_WINDOW_SIZE=50s) that none closes before the second reading.
type memoryResult struct {
	Windows         int64   `json:"windows_opened"`
	StreamLenBefore int64   `json:"stream_len_before"`
	StreamLen       int64   `json:"stream_len"` // open windows, as the streams hold them
	Pending         int64   `json:"pending"`    // of them read by a worker (PEL entries)
	UsedBefore      int64   `json:"used_memory_before"`
	UsedAfter       int64   `json:"used_memory_after"`
	BytesPerWindow  float64 `json:"bytes_per_open_window"`
	Sample          int     `json:"sample"`
	WindowBytes     float64 `json:"window_bytes_avg"` // MEMORY USAGE of sampled window keys
	WindowEncoding  string  `json:"window_encoding"`  // the window is one string (embstr/raw)
	// DedupeSets, DedupeMembers and DedupeBytes are the per-bucket dedupe
	// SETs (combo:{N}:s:<bucket>) that exist after the fill: how many, how
	// many members they hold in all (the ids and each set's marker 0), and
	// their summed MEMORY USAGE. DedupeBytesPerMember is what one
	// remembered id costs: the bytes over the ids (set overhead amortized).
	DedupeSets           int     `json:"dedupe_sets"`
	DedupeMembers        int64   `json:"dedupe_members"`
	DedupeBytes          int64   `json:"dedupe_sets_memory_usage"`
	DedupeBytesPerMember float64 `json:"dedupe_member_bytes_avg"`
	// StreamPerEntry is the rest of the INFO delta: one window's stream
	// entry and pending entry, plus what MEMORY USAGE leaves out of the
	// samples above (it counts a key's name, value and dict entry, but not
	// its expires entry nor its share of the dicts' bucket arrays). MEMORY
	// USAGE of a stream estimates its PEL coarsely
	// (several times too high on Redis 7.0), so it is kept for reference
	// only, as StreamUsage.
	StreamPerEntry float64  `json:"stream_bytes_per_entry"`
	StreamUsage    int64    `json:"stream_memory_usage"`
	Fill           result   `json:"fill"`
	Notes          []string `json:"notes,omitempty"`
}

// memory opens -windows windows (each report on a new combo key, batches of
// -b) and reads INFO used_memory before and after; the difference over the
// number of windows is the cost of one open window: its hash, its dedupe
// set member (one report per window here), its stream entry and its
// pending entry. MEMORY USAGE of a sample of windows and of every dedupe
// set breaks that down. The "before" reading must not include dedupe sets
// of earlier runs that expire during this one: bench.sh waits for them to
// expire first, and a note is printed if any were there.
func (b *bench) memory() (printable, error) {
	ctx := context.Background()
	cfg := b.cfg
	keys := repo.NewKeys(cfg.Shards)
	var out memoryResult

	if cfg.WaitClean > 0 {
		left, err := waitClean(ctx, b.rdb, keys, cfg.WaitClean)
		if err != nil {
			return nil, err
		}
		if left != "" {
			out.Notes = append(out.Notes, fmt.Sprintf("keys of earlier runs were still there after -wait-clean %s (%s, maybe more); if they expire during the fill the per-window figure is too low", cfg.WaitClean, left))
		}
	}
	var err error
	if out.StreamLenBefore, _, err = streamState(ctx, b.rdb, keys); err != nil {
		return nil, err
	}
	if out.UsedBefore, err = usedMemory(ctx, b.rdb); err != nil {
		return nil, err
	}
	if sets, members, _, err := dedupeSets(ctx, b.rdb, keys); err != nil {
		return nil, err
	} else if sets > 0 {
		out.Notes = append(out.Notes, fmt.Sprintf("%d dedupe sets (%d ids) of earlier runs were there before the fill; if they expire during it the per-window figure is too low", sets, members))
	}

	wl := newWorkload()
	b.col.track(wl.activity)
	b.cpu.reset()
	var kc keyCounter
	l := runFresh(cfg.Concurrency, b.cli, wl, &kc, int64(cfg.Windows), cfg.Batch)
	out.Fill = newResult(cfg, "batch", l)
	// Divided by the windows the fill's answers say they opened, not by
	// -windows: reports that failed opened none.
	out.Windows = l.rec.opened
	if out.Windows == 0 {
		return nil, fmt.Errorf("the fill of %d windows opened none (%d reports failed)", cfg.Windows, l.rec.errors)
	}
	if out.Windows < int64(cfg.Windows) {
		out.Notes = append(out.Notes, fmt.Sprintf("the fill opened %d of the %d windows asked for (%d reports failed, %d answered duplicate): the figure is per window opened",
			out.Windows, cfg.Windows, l.rec.errors, l.rec.duplicates))
	}
	out.Fill.CPU = b.cpu.since(l.rec.acked)

	// Let the worker read the new entries: their pending entries are part
	// of what an open window costs.
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		n, pending, err := streamState(ctx, b.rdb, keys)
		if err != nil {
			return nil, err
		}
		out.StreamLen, out.Pending = n, pending
		if pending >= n {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if out.UsedAfter, err = usedMemory(ctx, b.rdb); err != nil {
		return nil, err
	}
	if out.Pending < out.StreamLen {
		out.Notes = append(out.Notes, fmt.Sprintf("the worker had read %d of the %d stream entries 5 s after the fill: the figure leaves out the pending entries of the rest", out.Pending, out.StreamLen))
	}
	opened := out.StreamLen - out.StreamLenBefore
	if opened < out.Windows*99/100 {
		out.Notes = append(out.Notes, fmt.Sprintf("only %d of the %d windows opened are open: were some flushed already? run the service with a long window (COMBO_WINDOW_SIZE=50s)", opened, out.Windows))
	}
	out.BytesPerWindow = float64(out.UsedAfter-out.UsedBefore) / float64(out.Windows)

	if err := out.sample(ctx, b.rdb, keys, wl, l.rec); err != nil {
		return nil, err
	}

	pc := awaitPushes(cfg, b.col, wl, l)
	out.Fill.Pushes = pc
	return out, nil
}

// streamState sums the streams' lengths and pending entries.
func streamState(ctx context.Context, rdb *redis.Client, keys repo.Keys) (length, pending int64, err error) {
	for s := 0; s < keys.Shards(); s++ {
		n, err := rdb.XLen(ctx, keys.Stream(s)).Result()
		if err != nil {
			return 0, 0, err
		}
		length += n
		p, err := rdb.XPending(ctx, keys.Stream(s), repo.Group).Result()
		if err != nil && err != redis.Nil && !isNoGroup(err) {
			return 0, 0, err
		}
		if p != nil {
			pending += p.Count
		}
	}
	return length, pending, nil
}

func isNoGroup(err error) bool { return redis.HasErrorPrefix(err, "NOGROUP") }

// globPrefix is a SCAN pattern for the keys starting with prefix, whose
// {tag} and any other glob character are escaped.
func globPrefix(prefix string) string {
	return strings.NewReplacer("{", "\\{", "}", "\\}", "[", "\\[", "]", "\\]", "*", "\\*", "?", "\\?").
		Replace(prefix) + "*"
}

// waitClean waits, up to limit, until no shard holds a dedupe set or a
// window key: a memory run's "before" reading must not include earlier
// runs' keys, whose expiry during the fill would be subtracted from its
// per-window figure. It names a key still there after limit, or "".
func waitClean(ctx context.Context, rdb *redis.Client, keys repo.Keys, limit time.Duration) (string, error) {
	start := time.Now()
	for {
		left, err := firstLeft(ctx, rdb, keys)
		if err != nil {
			return "", err
		}
		if left == "" || time.Since(start) >= limit {
			return left, nil
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
}

// firstLeft names a dedupe set or window key of any shard, or "".
func firstLeft(ctx context.Context, rdb *redis.Client, keys repo.Keys) (string, error) {
	for s := range keys.Shards() {
		for _, prefix := range []string{keys.SeenPrefix(s), keys.WindowPrefix(s)} {
			iter := rdb.Scan(ctx, 0, globPrefix(prefix), 1000).Iterator()
			if iter.Next(ctx) {
				return iter.Val(), nil
			}
			if err := iter.Err(); err != nil {
				return "", err
			}
		}
	}
	return "", nil
}

// dedupeSets finds every dedupe bucket SET of the shards and sums their
// sizes and MEMORY USAGE (SAMPLES 0: every member counted).
func dedupeSets(ctx context.Context, rdb *redis.Client, keys repo.Keys) (sets int, members, bytes int64, err error) {
	for s := 0; s < keys.Shards(); s++ {
		iter := rdb.Scan(ctx, 0, globPrefix(keys.SeenPrefix(s)), 1000).Iterator()
		for iter.Next(ctx) {
			k := iter.Val()
			n, err := rdb.SCard(ctx, k).Result()
			if err != nil {
				return 0, 0, 0, err
			}
			v, err := rdb.MemoryUsage(ctx, k, 0).Result()
			if err == redis.Nil {
				continue // expired between SCAN and here
			}
			if err != nil {
				return 0, 0, 0, err
			}
			sets++
			members += n
			bytes += v
		}
		if err := iter.Err(); err != nil {
			return 0, 0, 0, err
		}
	}
	return sets, members, bytes, nil
}

// sample reads MEMORY USAGE (SAMPLES 0: exact) of up to 200 window keys of
// the run, of every dedupe set, and of the whole streams.
func (m *memoryResult) sample(ctx context.Context, rdb *redis.Client, keys repo.Keys, wl *workload, rec *recorder) error {
	const n = 200
	step := max(m.Windows/n, 1)
	var hashSum, hashN int64
	for k := int64(0); k < m.Windows && hashN < n; k += step {
		ck := wl.key(k)
		shard := keys.Shard(ck.Activity, ck.User, ck.ItemType)
		v, err := rdb.MemoryUsage(ctx, keys.Current(shard, ck.Activity, ck.User, ck.ItemType), 0).Result()
		if err == redis.Nil {
			continue
		}
		if err != nil {
			return err
		}
		hashSum += v
		hashN++
		if m.WindowEncoding == "" {
			m.WindowEncoding, _ = rdb.ObjectEncoding(ctx, keys.Current(shard, ck.Activity, ck.User, ck.ItemType)).Result()
		}
	}
	for s := 0; s < keys.Shards(); s++ {
		v, err := rdb.MemoryUsage(ctx, keys.Stream(s), 0).Result()
		if err != nil && err != redis.Nil {
			return err
		}
		m.StreamUsage += v
	}
	m.Sample = int(hashN)
	if hashN > 0 {
		m.WindowBytes = float64(hashSum) / float64(hashN)
	}
	var err error
	if m.DedupeSets, m.DedupeMembers, m.DedupeBytes, err = dedupeSets(ctx, rdb, keys); err != nil {
		return err
	}
	m.DedupeBytesPerMember = bytesPerID(m.DedupeBytes, m.DedupeMembers, m.DedupeSets)
	m.StreamPerEntry = m.BytesPerWindow - m.WindowBytes - m.DedupeBytesPerMember
	return nil
}

// bytesPerID is what one remembered id costs in dedupe sets of bytes in
// all: every set also holds the member 0, which marks it created (see
// report.lua), so the ids are the members less one per set.
func bytesPerID(bytes, members int64, sets int) float64 {
	ids := members - int64(sets)
	if ids <= 0 {
		return 0
	}
	return float64(bytes) / float64(ids)
}

func (m memoryResult) checks() []*pushCheck { return runs{m.Fill}.checks() }

func (m memoryResult) print(w io.Writer) {
	fmt.Fprintf(w, "windows opened          %d (in %.1fs, %.0f reports/s, %d errors)\n",
		m.Windows, m.Fill.Seconds, m.Fill.Throughput, m.Fill.Errors)
	fmt.Fprintf(w, "stream length           %d before, %d after (%d pending)\n", m.StreamLenBefore, m.StreamLen, m.Pending)
	fmt.Fprintf(w, "used_memory             %d -> %d bytes\n", m.UsedBefore, m.UsedAfter)
	fmt.Fprintf(w, "bytes per open window   %.0f  (INFO memory delta / windows)\n", m.BytesPerWindow)
	fmt.Fprintf(w, "  window key            %.0f  (MEMORY USAGE, sample of %d; encoding %s)\n", m.WindowBytes, m.Sample, m.WindowEncoding)
	fmt.Fprintf(w, "  dedupe id             %.0f  (MEMORY USAGE of %d dedupe sets / %d ids)\n", m.DedupeBytesPerMember, m.DedupeSets, m.DedupeMembers-int64(m.DedupeSets))
	fmt.Fprintf(w, "  rest                  %.0f  (stream entry + PEL entry + expires entry + dict bucket arrays)\n", m.StreamPerEntry)
	if p := m.Fill.Pushes; p != nil {
		fmt.Fprintf(w, "afterwards: %d of %d windows pushed, lag p99 %.1f ms max %.1f ms, conserved %v\n",
			p.WindowsPushed, p.WindowsExpected, p.Lag.P99, p.Lag.Max, p.Conserved)
	}
	for _, n := range append(m.Notes, m.Fill.Notes...) {
		fmt.Fprintln(w, "note:", n)
	}
}
