package repo_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/combo-service/combo-service/internal/testredis"
	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/repo"
)

// A call of 150 new windows is two report scripts (of 100 and 50) in one
// pipeline. Redis answers the first and then stops answering: the call
// fails UNAVAILABLE, yet the first script ran, whole, and its 100 windows
// will be pushed. The call's error says so (repo.WindowsOpened, for
// combo_windows_opened_total), and the retry finds those 100 duplicates.
func TestCallAnsweredInPartSaysWhatItOpened(t *testing.T) {
	const timeout = 500 * time.Millisecond
	srv := testredis.Start(t, testredis.Options{})
	r, _, stalled := partlyAnsweringRepo(t, srv.Addr, timeout)
	cs := make([]*combo.Contribution, 150)
	for i := range cs {
		cs[i] = contribution(int64(i+1), fmt.Sprint("t", i), base)
	}
	_, err := r.Report(context.Background(), cs)
	if !errors.Is(err, repo.ErrUnavailable) {
		t.Fatalf("a call whose second script Redis did not answer: %v, want ErrUnavailable", err)
	}
	if !stalled.Load() {
		t.Fatal("no pipeline was answered in part: the test did not test")
	}
	if n := repo.WindowsOpened(err); n != 100 {
		t.Errorf("the call opened %d windows by repo.WindowsOpened, want 100: the first script's", n)
	}

	firstHundredWereCounted(t, srv.Client(), cs)
}

// Seven calls of 15 reports share one pipeline: a script of 100 reports,
// the first six calls' and ten of the seventh's, then one of 5. Redis
// answers the first script and stops answering. The six calls answered
// whole succeed (they were counted; failing them made their callers send
// them again, for nothing); the seventh fails, saying it opened 10
// windows; and a call queued meanwhile fails at once, unsent, as behind a
// pipeline Redis did not answer at all, instead of riding the next one
// into the same silence.
func TestSharedPipelineAnsweredInPart(t *testing.T) {
	const timeout = 500 * time.Millisecond
	srv := testredis.Start(t, testredis.Options{})
	r, rdb, stalled := partlyAnsweringRepo(t, srv.Addr, timeout)
	ctx := context.Background()
	// The first pipeline waits until the seven calls are queued, so that
	// they share the second.
	release := make(chan struct{})
	var pipelines atomic.Int64
	rdb.AddHook(beforeScripts(func() {
		if pipelines.Add(1) == 1 {
			<-release
		}
	}))
	first := make(chan error, 1)
	go func() {
		_, err := r.Report(ctx, []*combo.Contribution{contribution(1000, "first", base)})
		first <- err
	}()
	waitFor(t, "a pipeline", func() bool { return pipelines.Load() > 0 })
	type answer struct {
		res []repo.ReportResult
		err error
	}
	calls := make([]chan answer, 7)
	for k := range calls {
		calls[k] = make(chan answer, 1)
		cs := make([]*combo.Contribution, 15)
		for i := range cs {
			id := int64(15*k + i + 1)
			cs[i] = contribution(id, fmt.Sprint("t", id), base)
		}
		go func() {
			res, err := r.Report(ctx, cs)
			calls[k] <- answer{res, err}
		}()
		waitPending(t, r, k+1) // in this order in the pipeline
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatalf("the first call: %v", err)
	}
	waitFor(t, "a second pipeline", func() bool { return pipelines.Load() >= 2 })
	queued := queueReports(ctx, r, 1)
	waitPending(t, r, 1)

	for k, ch := range calls {
		var a answer
		select {
		case a = <-ch:
		case <-time.After(10 * time.Second):
			t.Fatalf("call %d never returned", k+1)
		}
		if k < 6 {
			if a.err != nil {
				t.Errorf("call %d, answered whole by the first script: %v, want its answer", k+1, a.err)
				continue
			}
			for i, rr := range a.res {
				if rr.Outcome != repo.Opened {
					t.Errorf("call %d report %d: outcome %v, want Opened", k+1, i+1, rr.Outcome)
				}
			}
			continue
		}
		if !errors.Is(a.err, repo.ErrUnavailable) {
			t.Errorf("call 7, answered in part: %v, want ErrUnavailable", a.err)
		}
		if n := repo.WindowsOpened(a.err); n != 10 {
			t.Errorf("call 7 opened %d windows by repo.WindowsOpened, want 10", n)
		}
	}
	if !stalled.Load() {
		t.Fatal("no pipeline was answered in part: the test did not test")
	}
	worst := slowestQueued(t, queued, 1, "unsent", "behind a pipeline answered in part")
	if worst > timeout*3/2 {
		t.Errorf("a report queued behind a pipeline answered in part took %v, want about one Timeout (%v)", worst, timeout)
	}
}

// partlyAnsweringRepo is a Repo and its client (set as the service sets its
// own: timeout bounds every call, no retries) reaches the Redis at addr
// through a proxy. Of the first pipeline of two report scripts or more
// (EVALSHA twice in one write) the proxy passes Redis the first script
// only, and holds the rest and all that follows on that connection: Redis
// answered the first and stopped answering, as a Redis paused between
// two scripts. It tells whether that happened.
func partlyAnsweringRepo(t *testing.T, addr string, timeout time.Duration) (*repo.Repo, *redis.Client, *atomic.Bool) {
	t.Helper()
	var stalled atomic.Bool
	proxy := writesProxy(t, addr, func(batch [][]byte) ([][]byte, bool) {
		scripts := 0
		for i, c := range batch {
			if bytes.Contains(bytes.ToLower(c), []byte("evalsha")) {
				scripts++
				if scripts == 2 && stalled.CompareAndSwap(false, true) {
					// Sent on up to the first script; the rest, and
					// all that follows, held.
					return batch[:i], false
				}
			}
		}
		return batch, true
	})
	r, rdb := proxiedRepo(t, proxy, timeout)
	return r, rdb, &stalled
}

// writesProxy proxies the Redis at addr, passing each write of the
// client's (its commands, read whole) through edit first: edit returns
// the commands to send on, and false to hold what follows on that
// connection, as a Redis that stopped answering.
func writesProxy(t *testing.T, addr string, edit func(batch [][]byte) ([][]byte, bool)) string {
	t.Helper()
	return testredis.Proxy(t, addr, func(in, out net.Conn) {
		go func() { _, _ = io.Copy(in, out); in.Close() }()
		defer out.Close()
		rd := bufio.NewReaderSize(in, 1<<20)
		var batch [][]byte // commands of one write of the client's
		for {
			cmd, err := readRESP2(rd)
			if err != nil {
				return
			}
			batch = append(batch, cmd)
			if rd.Buffered() > 0 {
				continue
			}
			send, more := edit(batch)
			if !writeAll(out, send) || !more {
				_, _ = io.Copy(io.Discard, rd)
				return
			}
			batch = batch[:0]
		}
	})
}

// proxiedRepo is a Repo, and its client, reaching Redis at addr, set as
// the service sets its own: timeout bounds every call, no retries.
func proxiedRepo(t *testing.T, addr string, timeout time.Duration) (*repo.Repo, *redis.Client) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, DialTimeout: timeout,
		ReadTimeout: timeout, WriteTimeout: timeout, MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	s := settings()
	s.Timeout = timeout
	r := repo.New(rdb, s)
	if err := r.LoadScripts(context.Background()); err != nil {
		t.Fatal(err)
	}
	return r, rdb
}

// writeAll writes cmds to w, and tells whether it could.
func writeAll(w io.Writer, cmds [][]byte) bool {
	for _, c := range cmds {
		if _, err := w.Write(c); err != nil {
			return false
		}
	}
	return true
}

// readRESP2 reads one whole RESP2 reply from rd and returns its bytes.
func readRESP2(rd *bufio.Reader) ([]byte, error) {
	line, err := rd.ReadBytes('\n')
	if err != nil {
		return nil, err
	}
	if len(line) < 3 {
		return nil, fmt.Errorf("short RESP line %q", line)
	}
	switch line[0] {
	case '+', '-', ':':
		return line, nil
	case '$':
		n, err := strconv.Atoi(string(bytes.TrimSpace(line[1:])))
		if err != nil || n < 0 {
			return line, err // -1: nil
		}
		body := make([]byte, n+2)
		if _, err := io.ReadFull(rd, body); err != nil {
			return nil, err
		}
		return append(line, body...), nil
	case '*':
		n, err := strconv.Atoi(string(bytes.TrimSpace(line[1:])))
		if err != nil {
			return nil, err
		}
		for range max(n, 0) {
			el, err := readRESP2(rd)
			if err != nil {
				return nil, err
			}
			line = append(line, el...)
		}
		return line, nil
	}
	return nil, fmt.Errorf("unknown RESP2 type %q", line[0])
}

// A call of 150 new windows is two report scripts in one pipeline. Redis
// runs the first and answers NOSCRIPT for the second (its script cache
// lost the script: on a Cluster, one master restarted), so the second is
// sent again with EVAL, and Redis does not answer that. The call fails
// UNAVAILABLE, and its error still counts the 100 windows the first
// script opened: the retry's failure does not drop the replies read
// before it.
func TestNoScriptRetryUnansweredKeepsWhatTheFirstScriptOpened(t *testing.T) {
	const timeout = 500 * time.Millisecond
	srv := testredis.Start(t, testredis.Options{})
	var phase atomic.Int32 // 0: rewrite the second script's sha; 1: hold EVAL; 2: held
	proxy := writesProxy(t, srv.Addr, func(batch [][]byte) ([][]byte, bool) {
		scripts := 0
		for i, c := range batch {
			lower := bytes.ToLower(c)
			if phase.Load() == 1 && bytes.Contains(lower, []byte("$4\r\neval\r\n")) {
				phase.Store(2) // Redis stops answering: the retry and all after it held
				return nil, false
			}
			const name = "$7\r\nevalsha\r\n$40\r\n"
			at := bytes.Index(lower, []byte(name))
			if at < 0 {
				continue
			}
			scripts++
			if scripts == 2 && phase.Load() == 0 {
				// A sha Redis never loaded: it answers NOSCRIPT.
				sha := at + len(name)
				batch[i] = append([]byte(nil), c...)
				copy(batch[i][sha:sha+40], strings.Repeat("0", 40))
				phase.Store(1)
			}
		}
		return batch, true
	})
	r, _ := proxiedRepo(t, proxy, timeout)

	cs := make([]*combo.Contribution, 150)
	for i := range cs {
		cs[i] = contribution(int64(i+1), fmt.Sprint("t", i), base)
	}
	_, err := r.Report(context.Background(), cs)
	if phase.Load() != 2 {
		t.Fatalf("phase %d: no NOSCRIPT retry was held: the test did not test (err %v)", phase.Load(), err)
	}
	if !errors.Is(err, repo.ErrUnavailable) {
		t.Fatalf("a call whose NOSCRIPT retry Redis did not answer: %v, want ErrUnavailable", err)
	}
	if n := repo.WindowsOpened(err); n != 100 {
		t.Errorf("the call opened %d windows by repo.WindowsOpened, want 100: the first script's", n)
	}
	firstHundredWereCounted(t, srv.Client(), cs)
}

// firstHundredWereCounted sends cs again, straight to Redis: the first 100
// were counted by the call before (Duplicate), the rest not (Opened).
func firstHundredWereCounted(t *testing.T, rdb redis.UniversalClient, cs []*combo.Contribution) {
	t.Helper()
	res, err := repo.New(rdb, settings()).Report(context.Background(), cs)
	if err != nil {
		t.Fatal(err)
	}
	for i, rr := range res {
		want := repo.Opened
		if i < 100 {
			want = repo.Duplicate
		}
		if rr.Outcome != want {
			t.Fatalf("report %d sent again: outcome %v, want %v", i+1, rr.Outcome, want)
		}
	}
}
