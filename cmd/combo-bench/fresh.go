package main

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/kitex_gen/combo/comboservice"
)

// keyCounter numbers the fresh combo keys of a run, so memory and curve
// phases never reuse a key and every report opens a window.
type keyCounter struct{ next atomic.Int64 }

// runFresh sends count reports as fast as c callers can, each on a combo key
// of its own, so each opens a window. batch 1 sends ReportContribution,
// larger batches ReportContributions.
func runFresh(c int, cli comboservice.Client, wl *workload, keys *keyCounter, count int64, batch int) load {
	limit := keys.next.Load() + count
	recs := make([]*recorder, c)
	var wg sync.WaitGroup
	start := time.Now()
	for g := range recs {
		recs[g] = newRecorder()
		wg.Go(func() {
			rec := recs[g]
			for {
				hi := keys.next.Add(int64(batch))
				lo := hi - int64(batch)
				hi = min(hi, limit)
				if lo >= hi {
					return
				}
				cs := make([]*combo.Contribution, 0, hi-lo)
				for k := lo; k < hi; k++ {
					cs = append(cs, wl.contribution(wl.key(k)))
				}
				if batch == 1 {
					sendOne(cli, cs[0], rec)
				} else {
					sendBatch(cli, cs, rec)
				}
			}
		})
	}
	wg.Wait()
	// Callers overshoot the counter at the end; the next phase starts at the limit.
	keys.next.Store(limit)
	end := time.Now()
	return load{rec: mergeAll(recs), start: start, end: end, elapsed: end.Sub(start)}
}
