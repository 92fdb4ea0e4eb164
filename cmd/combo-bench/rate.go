package main

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/combo-service/combo-service/kitex_gen/combo/comboservice"
)

// runRate offers a fixed rate of new windows: report n goes to combo key n,
// which no other report uses, so every report opens a window. A pacer
// releases report n at start + n/rate; c callers take them from a queue and
// send each with ReportContribution. An open-loop load: a slow service does
// not slow the offered rate down (until the queue of one second is full),
// and how late reports left is reported as send delay. RPC latency is
// taken from the moment the pacer released a report, not from when a
// caller got to send it: a stall that leaves reports waiting for a free
// caller shows in their latency too (no coordinated omission). So does a
// longer stall, which fills the queue and holds the pacer up: a report
// released late is timed from its due time plus one tick, when it should
// have gone.
func runRate(cfg config, cli comboservice.Client, wl *workload) load {
	type job struct {
		n        int64
		due      time.Time // its place in the schedule
		released time.Time // the tick that let it go, at most 1 ms after due
	}
	jobs := make(chan job, max(int(cfg.Rate), 1))
	recs := make([]*recorder, cfg.Concurrency)
	delays := make([][]time.Duration, cfg.Concurrency)
	lastSends := make([]time.Time, cfg.Concurrency) // each caller's last take of a report
	var wg sync.WaitGroup
	for g := range recs {
		recs[g] = newRecorder()
		wg.Go(func() {
			rec := recs[g]
			for j := range jobs {
				lastSends[g] = time.Now()
				delays[g] = append(delays[g], time.Since(j.due))
				sendOneFrom(cli, wl.contribution(wl.key(j.n)), rec, j.released)
			}
		})
	}

	total := int64(cfg.Rate * cfg.Duration.Seconds())
	if cfg.Reports > 0 && (total == 0 || cfg.Reports < total) {
		total = cfg.Reports
	}
	interval := time.Duration(float64(time.Second) / cfg.Rate)
	start := time.Now()
	// A 1 ms tick releases every report whose time has come: finer pacing
	// than a timer per report, which the Go runtime cannot honour at
	// thousands per second.
	tick := time.NewTicker(time.Millisecond)
	var n int64
	for n < total {
		now := <-tick.C
		for ; n < total; n++ {
			due := start.Add(time.Duration(n) * interval)
			if due.After(now) {
				break
			}
			// now is the tick that found it due, or, after the pacer was
			// held up by a full queue, a later one: timed from there, the
			// reports due meanwhile would leave the hold-up out.
			released := now
			if late := due.Add(time.Millisecond); released.After(late) {
				released = late
			}
			jobs <- job{n: n, due: due, released: released}
		}
	}
	tick.Stop()
	close(jobs)
	wg.Wait()
	end := time.Now()

	var all []time.Duration
	for _, d := range delays {
		all = append(all, d...)
	}
	sd := summarize(all)
	l := load{rec: mergeAll(recs), start: start, end: end, elapsed: end.Sub(start)}
	l.sendDelay = &sd
	if note := rateNotReached(cfg, l.rec.sent, start, slices.MaxFunc(lastSends, time.Time.Compare), interval); note != "" {
		l.notes = append(l.notes, note)
	}
	return l
}

// rateReached is the share of the offered rate a rate run must send for
// its figures to stand for that rate.
const rateReached = 0.98

// rateNotReached says so when a rate run sent its reports at under
// rateReached of the offered rate, or returns "". The push lag is timed
// from each report's send, so it looks as good at a load the callers (or
// a service holding the pacer up) could not offer. The rate sent is
// taken over the span from start to the last report's take by a caller,
// plus one interval (n reports at the rate span n intervals), less one
// pacer tick (a report leaves up to a tick after its due time): not to
// the last answer, whose latency says nothing of the rate.
func rateNotReached(cfg config, sent int64, start, lastSend time.Time, interval time.Duration) string {
	if sent == 0 || lastSend.IsZero() {
		return ""
	}
	span := max(lastSend.Sub(start)+interval-time.Millisecond, interval)
	rate := float64(sent) / span.Seconds()
	if rate >= rateReached*cfg.Rate {
		return ""
	}
	return fmt.Sprintf("offered %.0f new windows/s, sent %.0f/s: the callers (-c %d) or the service did not keep up, "+
		"so these figures are for a lower load than asked (see send delay)", cfg.Rate, rate, cfg.Concurrency)
}
