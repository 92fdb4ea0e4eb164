package rpcserver

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/cloudwego/kitex/pkg/rpcinfo"
	"github.com/cloudwego/kitex/pkg/stats"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"golang.org/x/sync/semaphore"
)

// Bounds on the large requests a replica works on at once.
const (
	// LargeRequestBytes is the size from which a request counts against
	// MaxLargeInFlightBytes: MergeLatest pages and batches of long
	// strings. Reports and ordinary batches, a few KB, never wait.
	LargeRequestBytes = 1 << 20
	// MaxLargeInFlightBytes bounds the bytes of large requests decoded,
	// handled and answered at once. Each costs about four times its size
	// while in flight (its bytes, its decoded rows, its encoded answer,
	// and the GC's headroom): a review measured the largest valid
	// MergeLatest, 47 MB, at about 200 MB of RSS each, and ten at once took
	// a replica to 1.9 GB. 128 MiB lets two of the largest run at once.
	// A large request takes its room once its bytes have all arrived; past
	// the bound it waits for room holding only those bytes (bounded with
	// every connection's unread bytes, MaxUnreadTotalBytes), up to
	// ReadWriteTimeout, then is refused and its connection closed (its
	// caller sees the connection closed, as for the guard's other
	// refusals).
	MaxLargeInFlightBytes = 128 << 20
)

// inFlight admits large requests within a byte budget: a request takes
// its size (at most the whole budget) once its bytes have arrived, before
// they are peeked whole and decoded (guardedCodec.DecodePayload), and
// gives it back when its RPC ends. It is a stats.Tracer for that: Kitex
// calls Finish once for every RPC whose decoding began, after its answer
// is written or however it failed (OnRead's deferred finishTracer),
// before the RPCInfo is reused for the connection's next request.
type inFlight struct {
	sem  *semaphore.Weighted
	max  int64
	wait time.Duration
	held sync.Map // rpcinfo.RPCInfo -> int64 taken, until the RPC's Finish

	atOnce, waited, refused prometheus.Counter
}

// newInFlight returns a budget of maxBytes, for which a large request
// waits up to wait, counting admissions on reg (nil: not exported).
func newInFlight(maxBytes int64, wait time.Duration, reg prometheus.Registerer) *inFlight {
	admissions := promauto.With(reg).NewCounterVec(prometheus.CounterOpts{
		Name: "combo_large_requests_total",
		Help: "Requests of 1 MiB or more (MergeLatest pages, large batches) that arrived whole, by admission into the " +
			"bytes a replica works on at once (128 MiB): at_once, waited (for room), or refused " +
			"(no room within the read timeout: the caller saw its connection closed).",
	}, []string{"admission"})
	for _, a := range largeAdmissions { // each exported from 0
		admissions.WithLabelValues(a)
	}
	return &inFlight{sem: semaphore.NewWeighted(maxBytes), max: maxBytes, wait: wait,
		atOnce: admissions.WithLabelValues(admissionAtOnce), waited: admissions.WithLabelValues(admissionWaited),
		refused: admissions.WithLabelValues(admissionRefused)}
}

// The admission label values of combo_large_requests_total (the alert
// rules' matchers are checked against this list).
const (
	admissionAtOnce  = "at_once"
	admissionWaited  = "waited"
	admissionRefused = "refused"
)

var largeAdmissions = []string{admissionAtOnce, admissionWaited, admissionRefused}

// admit takes n bytes of the budget for ri's large request, waiting up
// to f.wait for them.
func (f *inFlight) admit(ri rpcinfo.RPCInfo, n int) error {
	w := min(int64(n), f.max) // larger than the budget: it runs alone
	if f.sem.TryAcquire(w) {
		f.atOnce.Inc()
		f.held.Store(ri, w)
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), f.wait)
	defer cancel()
	if err := f.sem.Acquire(ctx, w); err != nil {
		f.refused.Inc()
		return fmt.Errorf("%d bytes of large requests already in flight on this replica, the most it works on "+
			"at once (rpcserver.MaxLargeInFlightBytes), for the %s it waited: send it again, or to another replica",
			f.max, f.wait)
	}
	f.waited.Inc()
	f.held.Store(ri, w)
	return nil
}

var _ stats.Tracer = (*inFlight)(nil)

func (f *inFlight) Start(ctx context.Context) context.Context { return ctx }

// Finish gives back what the RPC's request took, if anything.
func (f *inFlight) Finish(ctx context.Context) {
	ri := rpcinfo.GetRPCInfo(ctx)
	if f == nil || ri == nil {
		return
	}
	if w, ok := f.held.LoadAndDelete(ri); ok {
		f.sem.Release(w.(int64))
	}
}
