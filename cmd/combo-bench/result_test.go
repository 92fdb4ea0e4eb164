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
