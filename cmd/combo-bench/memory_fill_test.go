package main

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudwego/kitex/client/callopt"

	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/repo"
)

// failingEveryOther fails every other batch, opening no window for it.
type failingEveryOther struct {
	repoClient
	calls atomic.Int64
}

func (c *failingEveryOther) ReportContributions(ctx context.Context, req *combo.ReportContributionsRequest, opts ...callopt.Option) (*combo.ReportContributionsResponse, error) {
	if c.calls.Add(1)%2 == 0 {
		return nil, errors.New("refused")
	}
	return c.repoClient.ReportContributions(ctx, req, opts...)
}

// Memory per window is divided by the windows the fill opened, not by
// -windows: with half its batches failing, the figure is not halved, and
// a note says how many opened. Before, it was divided by -windows.
func TestMemoryPerWindowIsOfTheWindowsOpened(t *testing.T) {
	const asked = 2000
	b := inProcessBench(t, config{Concurrency: 1, Batch: 50, Windows: asked, Shards: 1, Settle: 50 * time.Millisecond})
	b.cli = &failingEveryOther{repoClient: b.cli.(repoClient)}
	out, err := b.memory()
	if err != nil {
		t.Fatal(err)
	}
	m := out.(memoryResult)
	if m.Windows != asked/2 || m.Fill.Errors != asked/2 {
		t.Fatalf("windows opened %d, reports failed %d; want %d each", m.Windows, m.Fill.Errors, asked/2)
	}
	if want := float64(m.UsedAfter-m.UsedBefore) / float64(asked/2); m.BytesPerWindow != want {
		t.Fatalf("bytes per open window %.1f, want %.1f (the memory delta over the %d windows opened)", m.BytesPerWindow, want, asked/2)
	}
	if len(m.Notes) == 0 {
		t.Fatal("no note says the fill opened fewer windows than asked")
	}
}

// The memory run's breakdown is of the run's own keys: the window key's
// bytes are the average MEMORY USAGE of the windows sampled (all of them,
// below the sample's 200), the dedupe figures are the sets' sizes and
// MEMORY USAGE summed, and the rest is the per-window figure less both.
func TestMemoryBreakdownIsOfTheRunsKeys(t *testing.T) {
	const windows = 120
	b := inProcessBench(t, config{Concurrency: 1, Batch: 40, Windows: windows, Shards: 1, Settle: 50 * time.Millisecond})
	out, err := b.memory()
	if err != nil {
		t.Fatal(err)
	}
	m := out.(memoryResult)
	ctx := context.Background()
	keys := repo.NewKeys(1)
	usage := func(pattern string) (n int, members, sum int64) {
		iter := b.rdb.Scan(ctx, 0, pattern, 1000).Iterator()
		for iter.Next(ctx) {
			n++
			sum += b.rdb.MemoryUsage(ctx, iter.Val(), 0).Val()
			members += b.rdb.SCard(ctx, iter.Val()).Val()
		}
		if err := iter.Err(); err != nil {
			t.Fatal(err)
		}
		return n, members, sum
	}
	n, _, sum := usage(globPrefix(keys.WindowPrefix(0)))
	if n != windows || m.Sample != windows || m.WindowBytes != float64(sum)/windows {
		t.Errorf("window keys: %d there, %d sampled, %.1f B each; want %d, %d, %.1f", n, m.Sample, m.WindowBytes, windows, windows, float64(sum)/windows)
	}
	sets, members, bytes := usage(globPrefix(keys.SeenPrefix(0)))
	if sets == 0 || m.DedupeSets != sets || m.DedupeMembers != members || m.DedupeBytes != bytes {
		t.Errorf("dedupe sets %d of %d members, %d B; want %d, %d, %d", m.DedupeSets, m.DedupeMembers, m.DedupeBytes, sets, members, bytes)
	}
	if want := m.BytesPerWindow - m.WindowBytes - m.DedupeBytesPerMember; m.StreamPerEntry != want {
		t.Errorf("rest %.1f B, want %.1f (per window %.1f less window key %.1f less dedupe id %.1f)",
			m.StreamPerEntry, want, m.BytesPerWindow, m.WindowBytes, m.DedupeBytesPerMember)
	}
	if want := b.rdb.MemoryUsage(ctx, keys.Stream(0), 0).Val(); m.StreamUsage != want {
		t.Errorf("stream MEMORY USAGE %d, want %d", m.StreamUsage, want)
	}
}
