package repo_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/combo-service/combo-service/internal/testredis"
	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/push"
	"github.com/combo-service/combo-service/repo"
)

// holdFirstReportPipeline adds a hook to rdb that holds the first pipeline
// of report scripts until release is closed; held says it is being held.
func holdFirstReportPipeline(rdb *redis.Client) (held *atomic.Bool, release chan struct{}) {
	held, release = &atomic.Bool{}, make(chan struct{})
	rdb.AddHook(testredis.PipelineHook(func(cmds []redis.Cmder) {
		if n := cmds[0].Name(); (n == "evalsha" || n == "eval") && !repo.IsDegradedPublish(cmds[0]) && held.CompareAndSwap(false, true) {
			<-release
		}
	}))
	return held, release
}

// The error of a call whose degraded publish failed names why its own
// reports degraded, not another call's in the same shared pipeline: it
// named the last cause of the whole pipeline, so a call degraded by a full
// stream could be told its report hit a key of the wrong type.
func TestFailedDegradedPublishNamesTheCallsOwnCause(t *testing.T) {
	ctx := context.Background()
	admin, user := userDeniedChannels(t) // every degraded publish fails: NOPERM
	r := fullStreamRepo(t, user, settings())
	// tulip's window key holds a hash: its report fails WRONGTYPE.
	if err := admin.HSet(ctx, r.Keys().Current(0, 7, 42, "tulip"), "x", "y").Err(); err != nil {
		t.Fatal(err)
	}
	release := queueBehindAJoin(t, r, user)
	// Both queued behind it, so the next pipeline carries both.
	full, wrong := make(chan error, 1), make(chan error, 1)
	go func() {
		_, err := r.Report(ctx, []*combo.Contribution{contribution(3, "lily", base)}) // a new window: the stream is full
		full <- err
	}()
	go func() {
		_, err := r.Report(ctx, []*combo.Contribution{contribution(4, "tulip", base)})
		wrong <- err
	}()
	waitPending(t, r, 2)
	release()
	for _, c := range []struct {
		name       string
		err        error
		own, other string
	}{
		{"report degraded by a full stream", <-full, "STREAMFULL", "WRONGTYPE"},
		{"report degraded by a key of the wrong type", <-wrong, "WRONGTYPE", "STREAMFULL"},
	} {
		if c.err == nil || !strings.Contains(c.err.Error(), "degraded publish failed") ||
			!strings.Contains(c.err.Error(), c.own) || strings.Contains(c.err.Error(), c.other) {
			t.Errorf("%s, its publish refused: %v, want the publish's failure naming %s, not %s", c.name, c.err, c.own, c.other)
		}
	}
}

// ObservePipeline (combo_report_pipeline_seconds, "the Redis latency
// reports see") times a pipeline's degraded publish too: its reports wait
// for that second round trip before they are answered. It timed the
// report scripts alone, so while Redis refused writes, or stalled after
// answering them, the metric showed a fast pipeline whose callers waited.
func TestObservePipelineTimesTheDegradedPublish(t *testing.T) {
	const delay = 300 * time.Millisecond
	ctx := context.Background()
	rdb := testredis.Start(t, testredis.Options{}).Client()
	t.Cleanup(func() { rdb.Close() })
	if err := rdb.ConfigSet(ctx, "min-replicas-to-write", "1").Err(); err != nil { // NOREPLICAS: reports degrade
		t.Fatal(err)
	}
	s := settings()
	took := make(chan time.Duration, 1)
	s.ObservePipeline = func(_ int, d time.Duration) { took <- d }
	r := repo.New(rdb, s)
	if err := r.LoadScripts(ctx); err != nil {
		t.Fatal(err)
	}
	rdb.AddHook(testredis.PipelineHook(func(cmds []redis.Cmder) {
		if repo.IsDegradedPublish(cmds[0]) {
			time.Sleep(delay) // a slow round trip
		}
	}))
	start := time.Now()
	res, err := r.Report(ctx, []*combo.Contribution{contribution(1, "rose", base)})
	answered := time.Since(start)
	if err != nil || res[0].Outcome != repo.Degraded {
		t.Fatalf("report while writes are refused: %+v %v, want degraded", res, err)
	}
	if d := <-took; d < delay {
		t.Errorf("ObservePipeline saw %v; the report was answered after %v, its degraded publish taking %v", d, answered, delay)
	}
}

// A degraded publish run past its deadline (it waited that long on a
// paused node's socket, and its sender stopped waiting) answers
// UNAVAILABLE and changes nothing: no push, its id not remembered, so the
// report sent again is published, once.
func TestDegradedPublishPastItsDeadlineChangesNothing(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		r, sub := subscribedRepo(t, rdb)
		clock := func() int64 {
			t.Helper()
			now, err := rdb.Time(ctx).Result()
			if err != nil {
				t.Fatal(err)
			}
			return now.UnixMilli()
		}
		c := contribution(1, "late", base)
		// Its sender waits a second at most: the deadline is 9 s gone.
		within, cancel := context.WithTimeout(ctx, time.Second)
		_, err := repo.PublishSinglesAfter(within, r, []*combo.Contribution{c}, clock()-10_000)
		cancel()
		if !errors.Is(err, repo.ErrUnavailable) || !strings.Contains(err.Error(), "past its deadline") {
			t.Fatalf("degraded publish past its deadline: %v, want ErrUnavailable naming the deadline", err)
		}
		within, cancel = context.WithTimeout(ctx, time.Second)
		known, err := repo.PublishSinglesAfter(within, r, []*combo.Contribution{c}, clock())
		cancel()
		if err != nil || known[c.Id] {
			t.Fatalf("degraded publish in time: %v %v, want published", known, err)
		}
		msg, err := receive(ctx, sub)
		if err != nil {
			t.Fatal(err)
		}
		if p, err := push.Decode([]byte(msg.Payload)); err != nil || p.Record.ID != c.Id {
			t.Fatalf("push %q: %v, want report %d", msg.Payload, err, c.Id)
		}
		// One push, not two: the late call's, had it published, would be
		// heard before the answer to a PING sent after both calls ran.
		if msg, err := testredis.MessageBeforePong(ctx, sub); err != nil {
			t.Fatal(err)
		} else if msg != nil {
			t.Fatalf("pushed twice: the degraded publish past its deadline published too: %s", msg.Payload)
		}
		if res, err := r.Report(ctx, []*combo.Contribution{c}); err != nil || res[0].Outcome != repo.Duplicate {
			t.Fatalf("report sent again after its degraded publish: %+v %v, want a duplicate", res, err)
		}
	})
}

// A degraded publish refused for one call's report (here its activity's
// channel is denied to the Redis user) fails that call alone: the other
// calls of the shared pipeline, whose reports were published, are answered
// degraded. Every call was failed with the other's error, told INTERNAL
// for a report that had been pushed; where Redis could not remember the
// id (refusing writes), its caller's retry was pushed again.
func TestDegradedPublishRefusedForOneCallFailsOnlyThatCall(t *testing.T) {
	ctx := context.Background()
	srv, admin := serverAllowingActivity7(t)
	user := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: "combo", Password: "pw", MaxRetries: -1})
	t.Cleanup(func() { user.Close() })
	r := fullStreamRepo(t, user, settings())
	sub := admin.Subscribe(ctx, push.Channel(7))
	t.Cleanup(func() { sub.Close() })
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	release := queueBehindAJoin(t, r, user)
	// Both queued behind it, so the next pipeline carries both; both
	// would open a window, and the stream is full.
	type answer struct {
		res []repo.ReportResult
		err error
	}
	allowed, denied := make(chan answer, 1), make(chan answer, 1)
	go func() {
		res, err := r.Report(ctx, []*combo.Contribution{contribution(3, "lily", base)})
		allowed <- answer{res, err}
	}()
	go func() {
		c := contribution(4, "lily", base)
		c.ActivityId = 8
		res, err := r.Report(ctx, []*combo.Contribution{c})
		denied <- answer{res, err}
	}()
	waitPending(t, r, 2)
	release()
	if a := <-allowed; a.err != nil || len(a.res) != 1 || a.res[0].Outcome != repo.Degraded {
		t.Errorf("the report published on its own: %+v %v, want degraded (not another call's refusal)", a.res, a.err)
	}
	if a := <-denied; a.err == nil || !strings.Contains(a.err.Error(), "degraded publish failed") || !strings.Contains(a.err.Error(), "NOPERM") {
		t.Errorf("the report whose channel is denied: %+v %v, want its publish's NOPERM", a.res, a.err)
	}
	if msg, err := receive(ctx, sub); err != nil {
		t.Fatal(err)
	} else if m, err := push.Decode([]byte(msg.Payload)); err != nil || m.Record.ID != 3 {
		t.Fatalf("push %q, want report 3 on its own", msg.Payload)
	}
	expectNoMorePushes(t, admin, sub)
}

// queueBehindAJoin sends a report that joins window 1 ("rose", opened at
// base) through r and holds its pipeline, so the calls made until release
// queue behind it and go out together in the next pipeline; release lets
// it go and fails t unless it was answered.
func queueBehindAJoin(t *testing.T, r *repo.Repo, rdb *redis.Client) (release func()) {
	t.Helper()
	held, let := holdFirstReportPipeline(rdb)
	first := make(chan error, 1)
	go func() {
		_, err := r.Report(context.Background(), []*combo.Contribution{contribution(2, "rose", base+1)})
		first <- err
	}()
	waitFor(t, "the first pipeline to be held", held.Load)
	return func() {
		t.Helper()
		close(let)
		if err := <-first; err != nil {
			t.Fatal(err)
		}
	}
}

// serverAllowingActivity7 starts a Redis whose user "combo" (password
// "pw") may run every command on every key but PUBLISH only on activity
// 7's channel; admin is its default user.
func serverAllowingActivity7(t *testing.T) (*testredis.Server, *redis.Client) {
	t.Helper()
	srv := testredis.Start(t, testredis.Options{})
	admin := srv.Client()
	t.Cleanup(func() { admin.Close() })
	if err := admin.Do(context.Background(), "ACL", "SETUSER", "combo", "on", ">pw", "~*", "resetchannels", "&"+push.Channel(7), "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	return srv, admin
}

// fullStreamRepo is a repo on rdb whose stream holds one window, opened
// (id 1, "rose" at base): a report that would open another degrades.
func fullStreamRepo(t *testing.T, rdb *redis.Client, s repo.Settings) *repo.Repo {
	t.Helper()
	ctx := context.Background()
	s.StreamMaxLen = 1
	r := repo.New(rdb, s)
	if err := r.LoadScripts(ctx); err != nil {
		t.Fatal(err)
	}
	if res, err := r.Report(ctx, []*combo.Contribution{contribution(1, "rose", base)}); err != nil || res[0].Outcome != repo.Opened {
		t.Fatalf("filling the stream: %+v %v", res, err)
	}
	return r
}

// A copy of a report queued by another call (the same id) is answered by
// its first copy's publish: when that is refused, the copy's call fails
// too, and is not answered duplicate for a report neither pushed nor
// remembered.
func TestCopyOfAReportWhosePublishIsRefusedFails(t *testing.T) {
	ctx := context.Background()
	srv, _ := serverAllowingActivity7(t)
	user := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: "combo", Password: "pw", MaxRetries: -1})
	t.Cleanup(func() { user.Close() })
	r := fullStreamRepo(t, user, settings())
	release := queueBehindAJoin(t, r, user)
	denied := contribution(3, "lily", base)
	denied.ActivityId = 8
	errs := make(chan error, 2)
	for range 2 { // the report and its copy, in two calls queued behind
		go func() {
			_, err := r.Report(ctx, []*combo.Contribution{denied})
			errs <- err
		}()
	}
	waitPending(t, r, 2)
	release()
	for range 2 {
		if err := <-errs; err == nil || !strings.Contains(err.Error(), "NOPERM") {
			t.Errorf("a report whose publish is refused, or its copy: %v, want the publish's NOPERM", err)
		}
	}
}

// Calls queued behind a degraded publish that Redis stops answering part
// way fail unsent with it (failQueued), also when Redis answered an
// earlier report of it with an error first (here its channel denied):
// that answered error was taken as the pipeline's, and failQueued left
// the queue alone. Here the call behind then failed by its own wait
// (expire), as it was queued when the publish was sent; one queued later
// was sent into the silence, and waited a second redis.timeout.
func TestQueueBehindAPublishRedisStopsAnsweringFailsUnsent(t *testing.T) {
	ctx := context.Background()
	srv, _ := serverAllowingActivity7(t)
	var cut atomic.Bool // set: pass Redis's replies up to its first NOPERM, then nothing
	addr := testredis.Proxy(t, srv.Addr, func(client, server net.Conn) {
		go io.Copy(server, client)
		buf := make([]byte, 64<<10)
		for {
			n, err := server.Read(buf)
			b := buf[:n]
			if i := bytes.Index(b, []byte("-NOPERM")); i >= 0 && cut.Load() {
				client.Write(b[:i+bytes.Index(b[i:], []byte("\r\n"))+2])
				return
			}
			if _, werr := client.Write(b); werr != nil || err != nil {
				return
			}
		}
	})
	const timeout = 300 * time.Millisecond
	user := redis.NewClient(&redis.Options{Addr: addr, Username: "combo", Password: "pw", MaxRetries: -1,
		ReadTimeout: time.Minute, ContextTimeoutEnabled: true})
	t.Cleanup(func() { user.Close() })
	s := settings()
	s.Timeout = timeout
	r := fullStreamRepo(t, user, s)
	publishing := make(chan struct{})
	user.AddHook(testredis.PipelineHook(func(cmds []redis.Cmder) {
		if repo.IsDegradedPublish(cmds[0]) && cut.CompareAndSwap(false, true) {
			close(publishing)
		}
	}))
	release := queueBehindAJoin(t, r, user)
	denied := contribution(3, "lily", base)
	denied.ActivityId = 8
	ahead := make(chan error, 2)
	for i, c := range []*combo.Contribution{denied, contribution(4, "tulip", base)} { // in this order
		go func() {
			_, err := r.Report(ctx, []*combo.Contribution{c})
			ahead <- err
		}()
		waitPending(t, r, i+1)
	}
	release()
	<-publishing
	behind := make(chan error, 1)
	go func() {
		_, err := r.Report(ctx, []*combo.Contribution{contribution(5, "daisy", base)})
		behind <- err
	}()
	for range 2 {
		<-ahead
	}
	if err := <-behind; !errors.Is(err, repo.ErrUnavailable) || !strings.Contains(err.Error(), "none for the pipeline ahead of it, unsent") {
		t.Errorf("a call queued behind the publish Redis stopped answering: %v, want UNAVAILABLE, unsent", err)
	}
}

// A report the script fails for answers the node's clock to the ms: Go
// dates its degraded publish's deadline from it (degrade.lua's ARGV[7]).
// Read to the second only, the deadline came up to 999 ms early, and a
// degraded publish sent in time answered late: its report failed
// UNAVAILABLE instead of being published on its own.
func TestFailedReportAnswersTheClockToTheMillisecond(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		s := settings()
		s.StreamMaxLen = 1 // the second window fails STREAMFULL
		r, _ := subscribedRepoWithGroups(t, rdb, s)
		if res, err := r.Report(ctx, []*combo.Contribution{contribution(1, "a", base)}); err != nil || res[0].Outcome != repo.Opened {
			t.Fatalf("first report: %+v %v, want opened", res, err)
		}
		// A clock cut to the second is still right when read at a whole
		// second: three readings all at one, one time in 10^9.
		for k := range 3 {
			before := redisNowMs(t, rdb)
			clocks, err := repo.FailedClocks(ctx, r, []*combo.Contribution{contribution(2, "b", base)})
			after := redisNowMs(t, rdb)
			if err != nil {
				t.Fatal(err)
			}
			if clocks[0] < before || clocks[0] > after {
				t.Fatalf("reading %d: the failed report's clock is %d ms, want between %d and %d (Redis TIME before and after)",
					k, clocks[0], before, after)
			}
		}
	})
}
