package repo_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/combo-service/combo-service/internal/testredis"
	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/repo"
)

// before is a hook that runs f before each pipeline reaches Redis: to add
// a round trip's delay, count pipelines, or hold one until released.
func before(f func()) testredis.PipelineHook {
	return func([]redis.Cmder) { f() }
}

// beforeScripts is before for pipelines of scripts only, the reports' (not
// those go-redis sends to set up a new connection).
func beforeScripts(f func()) testredis.PipelineHook {
	return func(cmds []redis.Cmder) {
		if name := cmds[0].Name(); name == "evalsha" || name == "eval" {
			f()
		}
	}
}

func hookedRepo(t *testing.T, f func()) *repo.Repo {
	t.Helper()
	rdb := testredis.Start(t, testredis.Options{}).Client()
	r := repo.New(rdb, settings())
	if err := r.LoadScripts(context.Background()); err != nil {
		t.Fatal(err)
	}
	rdb.AddHook(before(f)) // for the reports' pipelines only
	return r
}

// Under steady load from many callers, no caller runs pipelines for
// others beyond its own answer: the caller that runs a pipeline hands the
// next one on once its own reports are answered, instead of running
// pipelines for as long as the load lasts. Counted, not timed: the test
// counts the pipelines a call ran on its own goroutine that did not carry
// it (a timed bound of 300 ms failed on a loaded machine with no caller
// at fault).
func TestNoCallerRunsPipelinesForOthersForLong(t *testing.T) {
	type caller struct {
		id      string // the contribution id of its current call
		others  int    // pipelines it ran during that call that did not carry it
		carried int64  // the number of the report pipeline that carried it
	}
	var seq atomic.Int64 // report pipelines started
	var mu sync.Mutex
	callers := map[int64]*caller{} // by goroutine: the test's callers only
	rdb := testredis.Start(t, testredis.Options{}).Client()
	r := repo.New(rdb, settings())
	if err := r.LoadScripts(context.Background()); err != nil {
		t.Fatal(err)
	}
	rdb.AddHook(testredis.PipelineHook(func(cmds []redis.Cmder) {
		time.Sleep(2 * time.Millisecond) // a round trip
		if name := cmds[0].Name(); name != "evalsha" && name != "eval" {
			return // not reports: a new connection's CLIENT SETINFO
		}
		n := seq.Add(1)
		carries := func(id string) bool {
			for _, cmd := range cmds {
				for _, a := range cmd.Args() {
					if fmt.Sprint(a) == id {
						return true
					}
				}
			}
			return false
		}
		mu.Lock()
		defer mu.Unlock()
		for _, c := range callers {
			if c.carried == 0 && carries(c.id) {
				c.carried = n
			}
		}
		if c := callers[goroutineID()]; c != nil && !carries(c.id) {
			c.others++ // a drain goroutine's pipelines run for no caller
		}
	}))
	const n = 16
	var id, calls, most, longest atomic.Int64
	var failed atomic.Value
	stop := time.Now().Add(1500 * time.Millisecond)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			me := &caller{}
			mu.Lock()
			callers[goroutineID()] = me
			mu.Unlock()
			for time.Now().Before(stop) {
				next := id.Add(1)
				mu.Lock()
				me.id, me.others, me.carried = fmt.Sprint(next), 0, 0
				mu.Unlock()
				queued := seq.Load()
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_, err := r.Report(ctx, []*combo.Contribution{contribution(next, "rose", base+next)})
				cancel()
				if err != nil {
					failed.Store(err)
					return
				}
				calls.Add(1)
				mu.Lock()
				others, waited := int64(me.others), me.carried-queued
				mu.Unlock()
				for m := most.Load(); others > m && !most.CompareAndSwap(m, others); m = most.Load() {
				}
				for m := longest.Load(); waited > m && !longest.CompareAndSwap(m, waited); m = longest.Load() {
				}
			}
		})
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		t.Fatalf("a report failed: %v", err)
	}
	// 16 calls of one report never fill a pipeline (maxItems), so the
	// first pipeline a caller runs carries its own call, and answers it.
	if m := most.Load(); m > 0 {
		t.Fatalf("a call ran %d pipelines that did not carry it (over %d calls): a caller ran others' pipelines", m, calls.Load())
	}
	// Nor does a call wait behind others, whoever runs the pipelines (most
	// are drain goroutines'): the pipeline carrying it is the first or
	// second to start once it is queued (the one in flight, then its
	// own). Two more are allowed for a caller descheduled between reading
	// the count and queueing its call.
	if w := longest.Load(); w > 4 {
		t.Fatalf("a call was carried by the %dth report pipeline to start after it was queued (over %d calls): calls wait behind others", w, calls.Load())
	}
}

// goroutineID is the running goroutine's number, read from its stack's
// first line ("goroutine 123 [running]:"): how the test tells which
// caller ran a pipeline, the hook running on the goroutine that sends it.
func goroutineID() int64 {
	var buf [64]byte
	f := strings.Fields(string(buf[:runtime.Stack(buf[:], false)]))
	id, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		panic(fmt.Sprintf("goroutineID: %q: %v", buf, err))
	}
	return id
}

// A caller that gives up while its report waits gets ErrCallerGone, not
// ErrUnavailable (Redis is fine), and the calls behind it still go through.
// A call whose ctx has ended before any pipeline takes it (here: before it
// is made, so the caller runs its own pipeline and skips it) is the caller
// gone too, not Redis down.
func TestCallerGoneBeforePipelineIsNotUnavailable(t *testing.T) {
	r := hookedRepo(t, func() {})
	for _, n := range []int{1, 50} { // a shared pipeline, and a big call's own
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		cs := make([]*combo.Contribution, n)
		for i := range cs {
			cs[i] = contribution(int64(100*n+i), "rose", base)
		}
		_, err := r.Report(ctx, cs)
		if !errors.Is(err, repo.ErrCallerGone) || errors.Is(err, repo.ErrUnavailable) {
			t.Fatalf("%d reports, ctx ended: %v, want ErrCallerGone and not ErrUnavailable", n, err)
		}
	}
}

func TestCallerGoneIsNotUnavailable(t *testing.T) {
	release := make(chan struct{})
	var held atomic.Bool
	r := hookedRepo(t, func() {
		if held.CompareAndSwap(false, true) {
			<-release // the first pipeline waits until released
		}
	})
	ctx := context.Background()
	first := make(chan error, 1)
	go func() {
		_, err := r.Report(ctx, []*combo.Contribution{contribution(1, "rose", base)})
		first <- err
	}()
	waitFor(t, "the first pipeline to be held", held.Load)
	// Queued behind the held pipeline: one that gives up, one that waits.
	gone, cancel := context.WithCancel(ctx)
	goneErr := make(chan error, 1)
	go func() {
		_, err := r.Report(gone, []*combo.Contribution{contribution(2, "lily", base)})
		goneErr <- err
	}()
	patient := make(chan error, 1)
	go func() {
		_, err := r.Report(ctx, []*combo.Contribution{contribution(3, "tulip", base)})
		patient <- err
	}()
	cancel()
	if err := <-goneErr; !errors.Is(err, repo.ErrCallerGone) || errors.Is(err, repo.ErrUnavailable) {
		t.Fatalf("abandoned call: %v, want ErrCallerGone and not ErrUnavailable", err)
	}
	close(release)
	for _, ch := range []chan error{first, patient} {
		select {
		case err := <-ch:
			if err != nil {
				t.Fatalf("report: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a report queued behind an abandoned one never finished")
		}
	}
}

// waitPending waits until n Report calls are queued for a shared pipeline.
func waitPending(t *testing.T, r *repo.Repo, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for repo.PendingCalls(r) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d calls queued after 5 s, want %d", repo.PendingCalls(r), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// blackhole accepts connections and never answers: a Redis behind a
// partition, or a host gone without a reset.
func blackhole(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

// blackholeRepo is a Repo on a Redis that never answers, its client set
// as the service sets its own: timeout bounds every call, no retries.
func blackholeRepo(t *testing.T, timeout time.Duration) (*repo.Repo, *redis.Client) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: blackhole(t), DialTimeout: timeout, ReadTimeout: timeout,
		WriteTimeout: timeout, MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	s := settings()
	s.Timeout = timeout
	return repo.New(rdb, s), rdb
}

// A report to a Redis that does not answer fails UNAVAILABLE saying it
// timed out and which setting bounds the wait, not only "context deadline
// exceeded", which names neither Redis nor the setting.
func TestUnansweredReportSaysItTimedOut(t *testing.T) {
	r, _ := blackholeRepo(t, 200*time.Millisecond)
	_, err := r.Report(context.Background(), []*combo.Contribution{contribution(1, "rose", base)})
	if !errors.Is(err, repo.ErrUnavailable) || !strings.Contains(err.Error(), "no answer in time (redis.timeout)") {
		t.Fatalf("report to a Redis that does not answer: %v, want ErrUnavailable saying it timed out", err)
	}
}

// A blocking read Redis does not answer (the worker's XREADGROUP on a
// pooled connection, Redis stalled) waits out its caller's deadline, not
// redis.timeout: go-redis gives such a read BLOCK + 10 s. Its error says it
// timed out, and does not send the operator to redis.timeout.
func TestUnansweredBlockingReadDoesNotNameRedisTimeout(t *testing.T) {
	const timeout, callerTimeout = 100 * time.Millisecond, 600 * time.Millisecond
	srv := testredis.Start(t, testredis.Options{})
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, DialTimeout: timeout, ReadTimeout: timeout,
		WriteTimeout: timeout, MaxRetries: -1, ContextTimeoutEnabled: true, PoolSize: 1})
	t.Cleanup(func() { rdb.Close() })
	s := settings()
	s.Timeout = timeout
	r := repo.New(rdb, s)
	ctx := context.Background()
	// Set-up, and the one connection pooled: under the 100 ms timeouts
	// meant for the read below, a loaded machine could miss it once.
	for deadline := time.Now().Add(10 * time.Second); ; {
		err := r.EnsureGroup(ctx, 0)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
	}
	if err := srv.Client().Do(ctx, "CLIENT", "PAUSE", "3000", "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, callerTimeout)
	defer cancel()
	start := time.Now()
	_, _, _, err := r.Read(rctx, 0, "c", ">", 10, 50*time.Millisecond)
	if waited := time.Since(start); waited < callerTimeout-50*time.Millisecond {
		t.Fatalf("the read failed after %v (%v), want its caller's %v: the test no longer shows what it means to", waited, err, callerTimeout)
	}
	if !errors.Is(err, repo.ErrUnavailable) || !strings.Contains(err.Error(), "no answer in time") || strings.Contains(err.Error(), "redis.timeout") {
		t.Fatalf("blocking read to a Redis that does not answer: %v, want ErrUnavailable saying it timed out, not naming redis.timeout", err)
	}
}

// When Redis does not answer (a partition, a dead host), a queued call
// fails unsent once it has waited Timeout for a pipeline: no call waits
// much more than two Timeouts, however deep the queue, where each pipeline
// of up to 1000 used to wait out a Timeout of its own in turn.
func TestQueuedCallsWaitAtMostTwoTimeouts(t *testing.T) {
	// The default redis.timeout. Waking the 4,500 callers takes up to a
	// quarter of a second under -race on a busy machine whatever the
	// Timeout, so a short one leaves that no room within the bound below.
	const timeout = 500 * time.Millisecond
	r, rdb := blackholeRepo(t, timeout)
	var pipelines atomic.Int64
	release := make(chan struct{})
	rdb.AddHook(before(func() {
		if pipelines.Add(1) == 1 {
			<-release // the first pipeline waits until the rest are queued
		}
	}))

	const queued = 4500 // five shared pipelines' worth
	errs := make(chan error, queued+1)
	go func() {
		_, err := r.Report(context.Background(), []*combo.Contribution{contribution(1, "rose", base)})
		errs <- err
	}()
	waitFor(t, "a pipeline", func() bool { return pipelines.Load() > 0 })
	for i := range queued {
		go func() {
			_, err := r.Report(context.Background(), []*combo.Contribution{contribution(int64(i+2), "rose", base)})
			errs <- err
		}()
	}
	waitPending(t, r, queued)
	start := time.Now()
	close(release)
	for range queued + 1 {
		select {
		case err := <-errs:
			if !errors.Is(err, repo.ErrUnavailable) {
				t.Fatalf("report to a Redis that does not answer: %v, want ErrUnavailable", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("reports to a Redis that does not answer never returned")
		}
	}
	// The first pipeline's Timeout, then one for the 1000 calls queued
	// behind it; the rest have waited a Timeout by then. The old queue
	// sent all six pipelines, one Timeout each (3 s here).
	if took := time.Since(start); took > 3*timeout {
		t.Errorf("queued calls failed %s after the first pipeline was sent, want at most about two Timeouts (%s each)", took, timeout)
	}
	if n := pipelines.Load(); n > 2 {
		t.Errorf("%d pipelines sent to a Redis that did not answer, want at most 2", n)
	}
}

// When a shared pipeline gets no answer within Timeout (Redis stalled, a
// partition), the calls queued behind it fail with it, unsent, instead of
// riding a second pipeline into the same silence: a call then waits at
// most about one Timeout, not two. With the default redis.timeout (500 ms)
// two are the whole of client.NewClient's 1 s RPC timeout, so during a
// stall callers got Kitex's own timeout instead of UNAVAILABLE.
func TestCallsQueuedBehindAnUnansweredPipelineFailWithIt(t *testing.T) {
	const timeout = 500 * time.Millisecond
	r, rdb := blackholeRepo(t, timeout)
	var pipelines atomic.Int64
	rdb.AddHook(before(func() { pipelines.Add(1) }))

	first := make(chan error, 1)
	go func() {
		_, err := r.Report(context.Background(), []*combo.Contribution{contribution(1, "rose", base)})
		first <- err
	}()
	waitFor(t, "a pipeline", func() bool { return pipelines.Load() > 0 })
	const queued = 100
	answers := queueReports(context.Background(), r, queued)
	waitPending(t, r, queued)
	if err := <-first; !errors.Is(err, repo.ErrUnavailable) {
		t.Fatalf("first report to a Redis that does not answer: %v, want ErrUnavailable", err)
	}
	worst := slowestQueued(t, answers, queued, "no answer in time (redis.timeout)", "to a Redis that does not answer")
	// About one Timeout (the rest of the first pipeline's); two is what a
	// second pipeline took, the whole of a caller's 1 s.
	if worst > timeout*3/2 {
		t.Errorf("a report queued behind an unanswered pipeline took %v, want about one Timeout (%v)", worst, timeout)
	}
	if n := pipelines.Load(); n != 1 {
		t.Errorf("%d pipelines sent to a Redis that did not answer the first, want 1", n)
	}
}

// While Redis refuses writes but answers (NOREPLICAS here; MISCONF and OOM
// alike), the degraded reports of every call in a shared pipeline are
// published in one round trip, not one per call: one after another, on
// the pipeline's one timeout, the later calls would fail as unavailable
// although Redis answers.
func TestDegradedCallsOfOnePipelinePublishTogether(t *testing.T) {
	ctx := context.Background()
	r, sub, rdb, count := refusingWrites(t)
	var held atomic.Bool
	release := make(chan struct{})
	rdb.AddHook(before(func() {
		if held.CompareAndSwap(false, true) {
			<-release
		}
	}))

	const calls = 200
	type answer struct {
		res []repo.ReportResult
		err error
	}
	answers := make(chan answer, calls)
	report := func(i int) {
		res, err := r.Report(ctx, []*combo.Contribution{contribution(int64(i+1), fmt.Sprint("t", i), base)})
		answers <- answer{res, err}
	}
	go report(0)
	waitFor(t, "the first pipeline to be held", held.Load)
	for i := 1; i < calls; i++ {
		go report(i)
	}
	waitPending(t, r, calls-1)
	close(release)
	for range calls {
		a := <-answers
		if a.err != nil || len(a.res) != 1 || a.res[0].Outcome != repo.Degraded {
			t.Fatalf("report while writes are refused: %+v, %v; want degraded", a.res, a.err)
		}
	}
	for range calls {
		if _, err := receive(ctx, sub); err != nil {
			t.Fatal(err)
		}
	}
	// The held pipeline's one call, then the 199 queued behind it.
	if count.alone.Load() != 0 || count.pipelines.Load() != 2 || count.inPipelines.Load() != calls {
		t.Fatalf("degraded publishes: %d alone, %d in %d pipelines; want %d in 2", count.alone.Load(), count.inPipelines.Load(), count.pipelines.Load(), calls)
	}
}

// A panic in a shared pipeline (a bug, or a hook of the Redis client)
// fails the calls it carried, and the shard's reports go on. It used to
// unwind the goroutine running the pipeline with its running slot still
// taken: every later report on the shard then waited, unsent, until its
// caller gave up, for as long as the process lived; and in the goroutine
// that carries on for queued calls (drain), it ended the process.
func TestPanicInAPipelineFailsOnlyItsCalls(t *testing.T) {
	for _, tc := range []struct {
		name    string
		panicAt int64 // the pipeline that panics, counting from 1
		queued  int   // calls queued behind the first pipeline
		failed  int   // calls the panicking pipeline carried
	}{
		{"a caller's own pipeline", 1, 0, 1},
		{"a caller's pipeline, calls queued behind it", 1, 3, 1},
		{"the pipeline run for queued calls", 2, 3, 3}, // last: unrecovered, it ends the test binary
	} {
		t.Run(tc.name, func(t *testing.T) {
			var pipelines atomic.Int64
			release := make(chan struct{})
			rdb := testredis.Start(t, testredis.Options{}).Client()
			s := settings()
			var panics atomic.Int64
			var stack atomic.Value
			s.OnPanic = func(p any, st []byte) {
				panics.Add(1)
				stack.Store(fmt.Sprintf("%v\n%s", p, st))
			}
			r := repo.New(rdb, s)
			if err := r.LoadScripts(context.Background()); err != nil {
				t.Fatal(err)
			}
			rdb.AddHook(beforeScripts(func() {
				n := pipelines.Add(1)
				if n == 1 {
					<-release // the first pipeline waits until the rest are queued
				}
				if n == tc.panicAt {
					panic("injected")
				}
			}))
			answers := make(chan error, 1+tc.queued)
			report := func(id int64) {
				defer func() {
					if p := recover(); p != nil { // as Kitex recovers a handler's panic
						answers <- fmt.Errorf("panicked: %v", p)
					}
				}()
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_, err := r.Report(ctx, []*combo.Contribution{contribution(id, fmt.Sprint("t", id), base)})
				answers <- err
			}
			go report(1)
			waitFor(t, "a pipeline", func() bool { return pipelines.Load() > 0 })
			for i := range tc.queued {
				go report(int64(i + 2))
			}
			waitPending(t, r, tc.queued)
			close(release)
			failed := 0
			for range 1 + tc.queued {
				select {
				case err := <-answers:
					if err == nil {
						continue
					}
					failed++
					if errors.Is(err, repo.ErrCallerGone) || errors.Is(err, repo.ErrUnavailable) || !errors.Is(err, repo.ErrPipelinePanic) ||
						!strings.Contains(err.Error(), "repo.Report") || strings.Contains(err.Error(), "injected") {
						t.Errorf("a call of a panicking pipeline: %v, want repo.Report's ErrPipelinePanic, without the panic's text, "+
							"not Redis down or its caller gone", err)
					}
				case <-time.After(10 * time.Second):
					t.Fatal("a report never returned")
				}
			}
			if failed != tc.failed {
				t.Errorf("%d calls failed, want the %d the panicking pipeline carried", failed, tc.failed)
			}
			// The panic reaches OnPanic once, with where it was raised.
			if st, _ := stack.Load().(string); panics.Load() != 1 || !strings.HasPrefix(st, "injected\n") ||
				!strings.Contains(st, "beforeScripts") {
				t.Errorf("OnPanic called %d times, last with %q; want once, with the panic and the hook's frame", panics.Load(), st)
			}
			// The shard goes on: a later report is sent and counted.
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			res, err := r.Report(ctx, []*combo.Contribution{contribution(100, "later", base)})
			if err != nil || res[0].Outcome != repo.Opened {
				t.Fatalf("report after a pipeline panicked: %+v %v, want a window opened", res, err)
			}
		})
	}
}

// When Redis answers the report scripts (each failing: it refuses writes)
// and then stalls during the degraded publish, the calls queued behind
// that pipeline fail with it, unsent, as behind a report pipeline Redis
// does not answer: a second pipeline into the same stall made them wait
// two Timeouts, the whole of client.NewClient's 1 s RPC timeout with the
// default redis.timeout, so callers got Kitex's timeout, not UNAVAILABLE.
func TestCallsQueuedBehindAnUnansweredDegradedPublishFailWithIt(t *testing.T) {
	const timeout = 500 * time.Millisecond
	ctx := context.Background()
	srv := testredis.Start(t, testredis.Options{})
	admin := srv.Client()
	t.Cleanup(func() { admin.Close() })
	if err := admin.ConfigSet(ctx, "min-replicas-to-write", "1").Err(); err != nil { // NOREPLICAS: reports degrade
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, ContextTimeoutEnabled: true,
		ReadTimeout: time.Minute, WriteTimeout: time.Minute})
	t.Cleanup(func() { rdb.Close() })
	s := settings()
	s.Timeout = timeout
	r := repo.New(rdb, s)
	if err := r.LoadScripts(ctx); err != nil {
		t.Fatal(err)
	}
	var reportPipelines atomic.Int64
	paused := make(chan struct{})
	var once sync.Once
	rdb.AddHook(testredis.PipelineHook(func(cmds []redis.Cmder) {
		if !repo.IsDegradedPublish(cmds[0]) {
			if n := cmds[0].Name(); n == "evalsha" || n == "eval" { // not a connection's set-up
				reportPipelines.Add(1)
			}
			return
		}
		once.Do(func() {
			// Redis stalls now: it answers nothing for 2 s.
			if err := admin.Do(ctx, "CLIENT", "PAUSE", "2000", "ALL").Err(); err != nil {
				t.Error(err)
			}
			close(paused)
		})
	}))

	first := make(chan error, 1)
	go func() {
		_, err := r.Report(ctx, []*combo.Contribution{contribution(1, "rose", base)})
		first <- err
	}()
	<-paused
	const queued = 100
	answers := queueReports(ctx, r, queued)
	waitPending(t, r, queued)
	if err := <-first; !errors.Is(err, repo.ErrUnavailable) || !strings.Contains(err.Error(), "degraded publish failed") {
		t.Fatalf("report whose degraded publish got no answer: %v, want ErrUnavailable naming the degraded publish", err)
	}
	worst := slowestQueued(t, answers, queued, "", "behind a degraded publish Redis does not answer")
	if worst > timeout*3/2 {
		t.Errorf("a report queued behind an unanswered degraded publish took %v, want about one Timeout (%v)", worst, timeout)
	}
	if n := reportPipelines.Load(); n != 1 {
		t.Errorf("%d report pipelines sent to a Redis that did not answer the degraded publish, want 1", n)
	}
}

// queuedAnswer is what a report queued behind a stalled pipeline got.
type queuedAnswer struct {
	err  error
	took time.Duration
}

// queueReports sends n single reports (ids 2 to n+1) at once, each from a
// goroutine of its own, and returns where their answers arrive.
func queueReports(ctx context.Context, r *repo.Repo, n int) <-chan queuedAnswer {
	answers := make(chan queuedAnswer, n)
	for i := range n {
		go func() {
			start := time.Now()
			_, err := r.Report(ctx, []*combo.Contribution{contribution(int64(i+2), "rose", base)})
			answers <- queuedAnswer{err, time.Since(start)}
		}()
	}
	return answers
}

// slowestQueued waits for n answers, each of which must be ErrUnavailable
// whose text holds saying ("" holds in any), and returns the longest any
// call took.
func slowestQueued(t *testing.T, answers <-chan queuedAnswer, n int, saying, what string) time.Duration {
	t.Helper()
	worst := time.Duration(0)
	for range n {
		select {
		case a := <-answers:
			if !errors.Is(a.err, repo.ErrUnavailable) || !strings.Contains(a.err.Error(), saying) {
				t.Fatalf("queued report %s: %v, want ErrUnavailable saying %q", what, a.err, saying)
			}
			worst = max(worst, a.took)
		case <-time.After(10 * time.Second):
			t.Fatalf("queued reports %s never returned", what)
		}
	}
	return worst
}

// A call whose caller gives up while a shared pipeline carries it waits
// for that pipeline and is answered with what Redis did: its report may
// have opened a window or been published on its own, and answered as the
// caller gone, it showed in no metric (the handler counted it canceled).
// A call still queued leaves unsent, as before.
func TestCarriedCallIsAnsweredAfterItsCallerGivesUp(t *testing.T) {
	var pipelines atomic.Int64
	release1, inSecond, release2 := make(chan struct{}), make(chan struct{}), make(chan struct{})
	rdb := testredis.Start(t, testredis.Options{}).Client()
	r := repo.New(rdb, settings())
	if err := r.LoadScripts(context.Background()); err != nil { // no NOSCRIPT round trip
		t.Fatal(err)
	}
	rdb.AddHook(beforeScripts(func() { // reports' pipelines only, not a connection's set-up
		switch pipelines.Add(1) {
		case 1:
			<-release1
		case 2:
			close(inSecond)
			<-release2
		}
	}))
	first := make(chan error, 1)
	go func() { // runs the first pipeline, held
		_, err := r.Report(context.Background(), []*combo.Contribution{contribution(1, "rose", base)})
		first <- err
	}()
	waitFor(t, "a pipeline", func() bool { return pipelines.Load() > 0 })
	gone, cancel := context.WithCancel(context.Background())
	defer cancel()
	type answer struct {
		res []repo.ReportResult
		err error
	}
	second := make(chan answer, 1)
	go func() { // queued behind it: the next pipeline carries it
		res, err := r.Report(gone, []*combo.Contribution{contribution(2, "lily", base)})
		second <- answer{res, err}
	}()
	waitPending(t, r, 1)
	close(release1)
	<-inSecond
	cancel() // its caller gives up while the pipeline carries it
	select {
	case a := <-second:
		t.Fatalf("answered %+v %v while its pipeline still ran, want its pipeline's answer", a.res, a.err)
	case <-time.After(200 * time.Millisecond): // nothing to wait for: it must not happen
	}
	close(release2)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if a := <-second; a.err != nil || a.res[0].Outcome != repo.Opened {
		t.Fatalf("carried call of a caller that gave up: %+v %v, want its window opened", a.res, a.err)
	}
}

// Calls queued behind pipelines that Redis answers, but slowly, leave the
// queue unsent once they have waited a whole Timeout (expire): the queue
// is not sent pipeline after pipeline, each a little too slow, while its
// callers wait for as many answers as there are pipelines ahead of them.
// Counted, not timed: each report pipeline here takes 0.6 Timeout, so the
// calls queued behind the second have waited more than a Timeout when it
// is answered, and no third pipeline is sent.
func TestQueueBehindSlowlyAnsweredPipelinesLeavesUnsent(t *testing.T) {
	const timeout = time.Second
	rdb := testredis.Start(t, testredis.Options{}).Client()
	s := settings()
	s.Timeout = timeout
	r := repo.New(rdb, s)
	if err := r.LoadScripts(context.Background()); err != nil {
		t.Fatal(err)
	}
	var pipelines atomic.Int64
	queued := make(chan struct{})
	rdb.AddHook(beforeScripts(func() {
		if pipelines.Add(1) == 1 {
			select { // the first pipeline waits until the rest are queued
			case <-queued:
			case <-time.After(5 * time.Second):
			}
		}
		time.Sleep(timeout * 6 / 10) // a Redis that answers slowly
	}))
	first := make(chan error, 1)
	go func() {
		_, err := r.Report(context.Background(), []*combo.Contribution{contribution(1, "rose", base)})
		first <- err
	}()
	waitFor(t, "a pipeline", func() bool { return pipelines.Load() > 0 })
	const n = 2100 // three shared pipelines' worth
	answers := queueReports(context.Background(), r, n)
	waitPending(t, r, n)
	close(queued)
	unsent := 0
	for range n {
		select {
		case a := <-answers:
			switch {
			case a.err == nil:
			case !errors.Is(a.err, repo.ErrUnavailable):
				t.Fatalf("report queued behind slow pipelines: %v, want it answered, or ErrUnavailable", a.err)
			case strings.Contains(a.err.Error(), "unsent"):
				unsent++
			}
		case <-time.After(10 * time.Second):
			t.Fatal("reports queued behind slow pipelines never returned")
		}
	}
	select {
	case err := <-first:
		if err != nil && !errors.Is(err, repo.ErrUnavailable) {
			t.Fatalf("the first report: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the first report never returned")
	}
	if got := pipelines.Load(); got > 2 || unsent < n-1000 {
		t.Errorf("%d report pipelines sent, %d of %d queued calls left unsent; want at most 2 pipelines, "+
			"the calls past the second left once they waited a Timeout", got, unsent, n)
	}
}
