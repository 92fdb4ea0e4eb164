package main

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudwego/kitex/client/callopt"

	"github.com/combo-service/combo-service/kitex_gen/combo"
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
