//go:build unix

package faultinject

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	kclient "github.com/cloudwego/kitex/client"
	"github.com/cloudwego/kitex/pkg/connpool"
	"github.com/redis/go-redis/v9"

	"github.com/combo-service/combo-service/client"
	"github.com/combo-service/combo-service/internal/testredis"
	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/kitex_gen/combo/comboservice"
	"github.com/combo-service/combo-service/repo"
)

// Short windows (CONTRACT timing scaled down); claim_idle must exceed
// W + grace (conf.Validate), and the gap is the margin a live owner has to
// flush before another replica takes over.
const (
	defaultWindow    = 200 * time.Millisecond
	defaultGrace     = 50 * time.Millisecond
	defaultClaimIdle = time.Second
)

type clusterOpts struct {
	window, grace, claimIdle time.Duration
	// viaGate puts a gateProxy between the replicas and Redis, so the test
	// can cut them off from Redis while its own subscriber stays connected
	// (see proxy_test.go).
	viaGate bool
	// allowDegraded accepts reports answered degraded (published on their
	// own): what the service does while Redis refuses writes.
	allowDegraded bool
}

// cluster is one scenario's world: a redis-server with AOF, the replicas
// (service processes) and a Redis client for the test's own inspection.
type cluster struct {
	t         *testing.T
	bin       string
	opts      clusterOpts
	redis     *testredis.Server
	rdb       *redis.Client // the test's own client, straight to Redis
	gate      *gateProxy    // nil unless opts.viaGate
	redisAddr string        // what the replicas dial: Redis, or the gate
	logDir    string
	stream    string // the (single shard's) stream of windows waiting to close
	ports     map[int]bool

	mu       sync.Mutex
	replicas []*replica
}

func newCluster(t *testing.T, opts clusterOpts) *cluster {
	t.Helper()
	if opts.window == 0 {
		opts.window = defaultWindow
	}
	if opts.grace == 0 {
		opts.grace = defaultGrace
	}
	if opts.claimIdle == 0 {
		opts.claimIdle = defaultClaimIdle
	}
	srv := testredis.Start(t, testredis.Options{AppendOnly: true})
	cl := &cluster{
		t: t, bin: serviceBinary(t), opts: opts, redis: srv, rdb: srv.Client(),
		redisAddr: srv.Addr, logDir: logDir(t), stream: repo.NewKeys(1).Stream(0),
		ports: map[int]bool{srv.Port: true},
	}
	if opts.viaGate {
		cl.gate = newGateProxy(t, srv.Addr)
		cl.redisAddr = cl.gate.Addr()
	}
	t.Cleanup(cl.shutdown)
	return cl
}

// logDir is where replica logs go: $FAULTINJECT_LOGDIR/<test> if set (kept),
// else a temporary directory (removed; its tails are printed on failure).
func logDir(t *testing.T) string {
	base := os.Getenv("FAULTINJECT_LOGDIR")
	if base == "" {
		return t.TempDir()
	}
	dir := filepath.Join(base, strings.NewReplacer("/", "_", " ", "_").Replace(t.Name()))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// freePort returns a loopback port not handed out in this cluster yet.
// Replicas restart on their ports, so the ports are taken below the
// kernel's ephemeral range: between a kill and the restart, no outgoing
// connection (of this test or a test package running in parallel) can be
// given one of them as its local port.
func (cl *cluster) freePort() int {
	cl.t.Helper()
	for range 200 {
		p := testredis.StablePort(cl.t)
		if cl.ports[p] {
			continue
		}
		cl.ports[p] = true
		return p
	}
	cl.t.Fatal("no free port found")
	return 0
}

// add declares a replica (not started). env are extra COMBO_* settings
// ("KEY=value") that override the cluster's.
func (cl *cluster) add(name string, env ...string) *replica {
	cl.t.Helper()
	r := &replica{
		cl: cl, name: name,
		rpcAddr:     "127.0.0.1:" + strconv.Itoa(cl.freePort()),
		metricsAddr: "127.0.0.1:" + strconv.Itoa(cl.freePort()),
		extraEnv:    env,
	}
	rpc, err := client.NewClient([]string{r.rpcAddr},
		kclient.WithRPCTimeout(time.Second), kclient.WithConnectTimeout(200*time.Millisecond),
		// Long connections: a short-connection client would leave a
		// TIME_WAIT socket per report and could exhaust ephemeral ports.
		kclient.WithLongConnection(connpool.IdleConfig{MaxIdlePerAddress: 16, MaxIdleGlobal: 64, MaxIdleTimeout: time.Minute}))
	if err != nil {
		cl.t.Fatal(err)
	}
	r.rpc = rpc
	cl.mu.Lock()
	cl.replicas = append(cl.replicas, r)
	cl.mu.Unlock()
	return r
}

// start adds n replicas named prefix-0.. and starts them.
func (cl *cluster) start(n int) []*replica {
	cl.t.Helper()
	rs := make([]*replica, n)
	for i := range rs {
		rs[i] = cl.add(fmt.Sprintf("replica-%c", 'a'+i))
		rs[i].start()
	}
	return rs
}

// pick returns a random replica that is up, other than avoid when another
// is up; if none is up, any replica (the call fails and is retried).
func (cl *cluster) pick(rng *rand.Rand, avoid *replica) *replica {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	var up []*replica
	for _, r := range cl.replicas {
		if r.up.Load() && r != avoid {
			up = append(up, r)
		}
	}
	if len(up) == 0 {
		for _, r := range cl.replicas {
			if r != avoid {
				up = append(up, r)
			}
		}
	}
	if len(up) == 0 {
		return avoid
	}
	return up[rng.IntN(len(up))]
}

func (cl *cluster) shutdown() {
	cl.mu.Lock()
	rs := append([]*replica(nil), cl.replicas...)
	cl.mu.Unlock()
	for _, r := range rs {
		if p := r.current(); p != nil && !p.exited() {
			_ = p.cmd.Process.Signal(syscall.SIGKILL)
			p.wait(10 * time.Second)
		}
	}
	cl.checkLogs()
}

// checkLogs fails the test on a panic in any replica's log (the worker
// recovers and logs them; a crash prints "panic:"), and on failure prints
// the tail of every log.
func (cl *cluster) checkLogs() {
	files, _ := filepath.Glob(filepath.Join(cl.logDir, "*.log"))
	files = append(files, filepath.Join(cl.redis.Dir, "redis.log"))
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, bad := range []string{"recovered panic", "panic:", "fatal error:", "DATA RACE"} {
			if strings.Contains(string(data), bad) {
				cl.t.Errorf("%s contains %q", filepath.Base(f), bad)
			}
		}
	}
	if !cl.t.Failed() {
		return
	}
	for _, f := range files {
		cl.t.Logf("--- tail of %s ---\n%s", f, tail(f, 40))
	}
}

func tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

// --- Redis inspection -------------------------------------------------------

func (cl *cluster) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 5*time.Second)
}

// pendingOf lists the stream entries pending on one consumer.
func (cl *cluster) pendingOf(consumer string) []string {
	cl.t.Helper()
	ctx, cancel := cl.ctx()
	defer cancel()
	res, err := cl.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{
		Stream: cl.stream, Group: repo.Group, Start: "-", End: "+", Count: 1_000_000, Consumer: consumer,
	}).Result()
	if err != nil && !redis.HasErrorPrefix(err, "NOGROUP") {
		cl.t.Fatalf("XPENDING %s: %v", consumer, err)
	}
	ids := make([]string, len(res))
	for i, p := range res {
		ids[i] = p.ID
	}
	return ids
}

// retired reports whether none of ids is left in the stream. An entry is
// deleted only by the flush script (which publishes the window in the same
// atomic step) or as unparsable, so "retired" means "published" unless the
// window was lost, which the conservation check catches.
func (cl *cluster) retired(ids []string) bool {
	cl.t.Helper()
	ctx, cancel := cl.ctx()
	defer cancel()
	pipe := cl.rdb.Pipeline()
	cmds := make([]*redis.XMessageSliceCmd, len(ids))
	for i, id := range ids {
		cmds[i] = pipe.XRangeN(ctx, cl.stream, id, id, 1)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		cl.t.Fatalf("XRANGE: %v", err)
	}
	for _, c := range cmds {
		if len(c.Val()) > 0 {
			return false
		}
	}
	return true
}

// leftovers describes what a fully drained service must not leave in
// Redis: stream entries, pending entries, window keys.
func (cl *cluster) leftovers() []string {
	cl.t.Helper()
	ctx, cancel := cl.ctx()
	defer cancel()
	var out []string
	if n, err := cl.rdb.XLen(ctx, cl.stream).Result(); err != nil {
		out = append(out, "XLEN: "+err.Error())
	} else if n != 0 {
		out = append(out, fmt.Sprintf("stream holds %d entries", n))
	}
	if p, err := cl.rdb.XPending(ctx, cl.stream, repo.Group).Result(); err != nil {
		out = append(out, "XPENDING: "+err.Error())
	} else if p.Count != 0 {
		out = append(out, fmt.Sprintf("%d entries pending: %v", p.Count, p.Consumers))
	}
	var windows []string
	for _, pattern := range repo.WindowPatterns() {
		keys, err := cl.rdb.Keys(ctx, pattern).Result() // test-side inspection only
		if err != nil {
			out = append(out, "KEYS: "+err.Error())
		}
		windows = append(windows, keys...)
	}
	if len(windows) > 0 {
		out = append(out, fmt.Sprintf("%d window keys left, e.g. %q", len(windows), windows[0]))
	}
	return out
}

// waitUntil polls cond every 20 ms until it holds, failing after timeout.
func waitUntil(t *testing.T, timeout time.Duration, what string, cond func() bool) time.Time {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return time.Now()
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// eventually polls cond every 20 ms for up to timeout and reports whether
// it came to hold.
func eventually(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// --- replicas ---------------------------------------------------------------

// replica is one service identity (consumer name, ports) that may run as
// several processes over time: a restart keeps its name and ports.
type replica struct {
	cl          *cluster
	name        string
	rpcAddr     string
	metricsAddr string
	extraEnv    []string
	rpc         comboservice.Client

	// up: the load generator may pick it. Cleared before a kill, set once
	// a (re)started process is ready.
	up     atomic.Bool
	mu     sync.Mutex
	proc   *process
	starts int
}

type process struct {
	cmd   *exec.Cmd
	log   string
	done  chan struct{}
	state *os.ProcessState
	err   error
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *process) wait(timeout time.Duration) bool {
	select {
	case <-p.done:
		return true
	case <-time.After(timeout):
		return false
	}
}

func (r *replica) current() *process {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.proc
}

func (r *replica) env() []string {
	cl := r.cl
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "COMBO_") {
			env = append(env, kv)
		}
	}
	return append(env,
		"COMBO_SERVER_ADDR="+r.rpcAddr,
		"COMBO_METRICS_ADDR="+r.metricsAddr,
		"COMBO_REDIS_ADDR="+cl.redisAddr,
		"COMBO_WINDOW_SIZE="+cl.opts.window.String(),
		"COMBO_WINDOW_GRACE="+cl.opts.grace.String(),
		"COMBO_WINDOW_STALE=60s",
		"COMBO_WINDOW_DEDUPE=60s",
		"COMBO_WORKER_CONSUMER="+r.name,
		"COMBO_WORKER_CLAIM_IDLE="+cl.opts.claimIdle.String(),
		"COMBO_WORKER_BLOCK=100ms",
		"COMBO_LOG_LEVEL=warn",
		"COMBO_LOG_FORMAT=console",
	)
}

// start runs a new process for the replica (same name, same ports) and
// waits until its /readyz answers 200.
func (r *replica) start() {
	t := r.cl.t
	t.Helper()
	r.mu.Lock()
	if r.proc != nil && !r.proc.exited() {
		r.mu.Unlock()
		t.Fatalf("%s: start while its process still runs", r.name)
	}
	r.starts++
	logPath := filepath.Join(r.cl.logDir, fmt.Sprintf("%s.%d.log", r.name, r.starts))
	r.mu.Unlock()

	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(r.cl.bin)
	cmd.Env = append(r.env(), r.extraEnv...)
	cmd.Stdout, cmd.Stderr = f, f
	err = testredis.StartChild(cmd) // dies with the test binary
	// The child has its own descriptor.
	f.Close()
	if err != nil {
		t.Fatalf("%s: start: %v", r.name, err)
	}
	p := &process{cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		p.state = cmd.ProcessState
		close(p.done)
	}()
	r.mu.Lock()
	r.proc = p
	r.mu.Unlock()
	r.waitReady(p, 20*time.Second)
	r.up.Store(true)
}

func (r *replica) waitReady(p *process, timeout time.Duration) {
	t := r.cl.t
	t.Helper()
	hc := &http.Client{Timeout: 500 * time.Millisecond}
	deadline := time.Now().Add(timeout)
	for {
		if p.exited() {
			t.Fatalf("%s exited while starting (%v); log:\n%s", r.name, p.err, tail(p.log, 30))
		}
		resp, err := hc.Get("http://" + r.metricsAddr + "/readyz")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready after %s (last: %v); log:\n%s", r.name, timeout, err, tail(p.log, 30))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (r *replica) signal(sig syscall.Signal) *process {
	t := r.cl.t
	t.Helper()
	p := r.current()
	if p == nil || p.exited() {
		t.Fatalf("%s: %v: not running", r.name, sig)
	}
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("%s: %v: %v", r.name, sig, err)
	}
	return p
}

// kill sends SIGKILL and waits for the process to be gone.
func (r *replica) kill() {
	r.cl.t.Helper()
	r.up.Store(false)
	p := r.signal(syscall.SIGKILL)
	if !p.wait(10 * time.Second) {
		r.cl.t.Fatalf("%s: still running 10s after SIGKILL", r.name)
	}
}

func (r *replica) pause()  { r.cl.t.Helper(); r.signal(syscall.SIGSTOP) }
func (r *replica) resume() { r.cl.t.Helper(); r.signal(syscall.SIGCONT) }

// terminate sends SIGTERM and waits up to timeout for the exit; it returns
// the exit state and when the exit was seen.
func (r *replica) terminate(timeout time.Duration) (*os.ProcessState, time.Time) {
	r.cl.t.Helper()
	r.up.Store(false)
	p := r.signal(syscall.SIGTERM)
	if !p.wait(timeout) {
		r.cl.t.Fatalf("%s: still running %s after SIGTERM; log:\n%s", r.name, timeout, tail(p.log, 30))
	}
	return p.state, time.Now()
}

// metric reads one sample from the replica's /metrics, e.g.
// metric(`combo_windows_flushed_total{status="gone"}`); absent reads as 0.
func (r *replica) metric(series string) float64 {
	t := r.cl.t
	t.Helper()
	hc := &http.Client{Timeout: 2 * time.Second}
	resp, err := hc.Get("http://" + r.metricsAddr + "/metrics")
	if err != nil {
		t.Fatalf("%s: scrape metrics: %v", r.name, err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err != nil {
				t.Fatalf("%s: metric %s: %v", r.name, line, err)
			}
			return v
		}
	}
	return 0
}

// leftovers must see a window the service left in Redis: its check is the
// last word of every scenario that Redis was drained. It looked for key
// names the service no longer writes, so it found none, ever.
func TestLeftoversSeesAnOpenWindow(t *testing.T) {
	cl := newCluster(t, clusterOpts{window: time.Minute, claimIdle: 2 * time.Minute})
	store := repo.New(cl.rdb, repo.Settings{Window: cl.opts.window, Grace: cl.opts.grace, Dedupe: time.Minute,
		Stale: 3 * time.Minute, Timeout: 5 * time.Second, Shards: 1, StreamMaxLen: 1000})
	ctx, cancel := cl.ctx()
	defer cancel()
	if err := store.EnsureGroups(ctx); err != nil {
		t.Fatal(err)
	}
	if left := cl.leftovers(); len(left) > 0 {
		t.Fatalf("a new Redis has leftovers: %v", left)
	}
	// Two windows of one key: the first parked by the second, a report
	// past the first one's W.
	k := comboKey{activity: 1, user: 1, itemType: itemTypes[0]}
	first, second := contribution(k, 1), contribution(k, 1)
	second.CreatedAt = first.CreatedAt + cl.opts.window.Milliseconds()
	if _, err := store.Report(ctx, []*combo.Contribution{first, second}); err != nil {
		t.Fatal(err)
	}
	left := cl.leftovers()
	if len(left) == 0 || !strings.Contains(strings.Join(left, "; "), "2 window keys") {
		t.Fatalf("leftovers = %q; want the 2 window keys (current and parked) reported", left)
	}
}
