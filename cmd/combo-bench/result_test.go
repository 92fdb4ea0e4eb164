package main

import (
	"testing"
	"time"
)

// Throughput is reports acknowledged over the time measured (start to the
// last answer), not reports sent, nor over -d: the same rule for naive
// and the service, so their ratio holds.
func TestThroughputIsAcknowledgedOverTheTimeMeasured(t *testing.T) {
	rec := newRecorder()
	rec.sent, rec.acked = 150, 100
	r := newResult(config{Duration: 10 * time.Second}, "single", load{rec: rec, elapsed: 2 * time.Second})
	if r.Throughput != 50 {
		t.Fatalf("throughput %v, want 50 (100 acknowledged in 2 s)", r.Throughput)
	}
}

// A result carries its run's own figures: the RPC latency over every RPC
// of the run, the offered rate of a rate run (benchplot plots against it
// and drops a run without one), the batch size of a batch run.
func TestResultCarriesTheRunsFigures(t *testing.T) {
	rec := newRecorder()
	for i := 100; i >= 1; i-- {
		rec.latencies = append(rec.latencies, time.Duration(i)*time.Millisecond)
	}
	cfg := config{Rate: 2500, Batch: 50}
	r := newResult(cfg, "rate", load{rec: rec, elapsed: time.Second})
	if want := (durStats{N: 100, P50: 50, P99: 99, Max: 100, Mean: 50.5}); r.Latency != want {
		t.Errorf("rpc latency %+v, want %+v", r.Latency, want)
	}
	if r.OfferedRate != 2500 || r.Batch != 0 {
		t.Errorf("rate run: offered %v, batch %d; want 2500, 0", r.OfferedRate, r.Batch)
	}
	if r := newResult(cfg, "batch", load{rec: rec, elapsed: time.Second}); r.Batch != 50 || r.OfferedRate != 0 {
		t.Errorf("batch run: offered %v, batch %d; want 0, 50", r.OfferedRate, r.Batch)
	}
}
