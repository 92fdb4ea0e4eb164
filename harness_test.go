package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudwego/kitex/client"
	"github.com/cloudwego/kitex/pkg/klog"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/combo-service/combo-service/conf"
	"github.com/combo-service/combo-service/internal/testredis"
	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/kitex_gen/combo/comboservice"
	"github.com/combo-service/combo-service/push"
)

// Test windows are short (CONTRACT timing scaled down) with generous waits.
const (
	testWindow = 200 * time.Millisecond
	testGrace  = 50 * time.Millisecond
)

var nextID atomic.Int64

func TestMain(m *testing.M) {
	nextID.Store(time.Now().UnixNano() / 1000)
	klog.SetLevel(klog.LevelWarn) // Kitex's start/stop lines would drown test output
	code := m.Run()
	if code != 0 {
		os.Exit(code) // a failed run is told already; what it left running is no news
	}
	if left := serviceGoroutinesLeft(10 * time.Second); left != "" {
		// Every loop run starts ends before it returns (each test's
		// service is stopped by then): one left running after its Redis
		// client closed would log errors for ever.
		fmt.Fprintf(os.Stderr, "goroutines of the service left running after every test:\n%s\n", left)
		code = 1
	}
	os.Exit(code)
}

// serviceGoroutinesLeft waits up to within for every goroutine running
// the service's own code (not the tests' Redis helpers) to end, and
// returns the stacks of those still running. The watch of connections'
// unread bytes is not among them: it runs while a connection is open,
// and Kitex leaves one open that was still busy at its exit wait (a test
// under load met one, its client's pooled connection kept open); the
// process's exit ends both.
func serviceGoroutinesLeft(within time.Duration) string {
	deadline := time.Now().Add(within)
	for {
		var left []string
		for g := range strings.SplitSeq(string(goroutines()), "\n\n") {
			if strings.Contains(g, "github.com/combo-service/combo-service") &&
				!strings.Contains(g, "combo-service/internal/testredis.") && !strings.Contains(g, "combo-service.TestMain") &&
				!strings.Contains(g, "combo-service.serviceGoroutinesLeft") && !strings.Contains(g, "(*unreadCloser).watch") {
				left = append(left, g)
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			return strings.Join(left, "\n\n")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// newID returns a contribution id unique within the test binary.
func newID() int64 { return nextID.Add(1) }

// service is one in-process combo-service (run() as main calls it) on a
// real redis-server, with an RPC client and a subscriber on every channel.
type service struct {
	t      *testing.T
	cfg    conf.Config
	redis  *testredis.Server
	rdb    redis.UniversalClient
	rpc    comboservice.Client
	addrs  started
	cancel context.CancelFunc
	done   chan error
	pushes *pushLog
}

type options struct {
	redis   *testredis.Server  // share a Redis between services
	cluster *testredis.Cluster // run on a Redis Cluster instead
	mutate  func(c *conf.Config)
	log     *zap.Logger // the service's; testLogger(t) if nil
}

func startService(t *testing.T, o options) *service {
	t.Helper()
	if o.redis == nil && o.cluster == nil {
		o.redis = testredis.Start(t, testredis.Options{})
	}
	cfg := conf.Default()
	cfg.Server.Addr = "127.0.0.1:0"
	cfg.Metrics.Addr = "127.0.0.1:0"
	var rdb redis.UniversalClient
	if o.cluster != nil {
		cfg.Redis.Addrs = o.cluster.Addrs
		rdb = o.cluster.Client(t)
		dialTLS(&cfg, o.cluster.TLS)
	} else {
		cfg.Redis.Addr = o.redis.Addr
		rdb = o.redis.Client()
		dialTLS(&cfg, o.redis.TLS)
	}
	cfg.Window.Size, cfg.Window.Grace = testWindow, testGrace
	cfg.Window.Dedupe, cfg.Window.Stale = 30*time.Second, 20*time.Second
	cfg.Worker.ClaimIdle = conf.DefaultClaimIdle(cfg.Window)
	cfg.Worker.Block = 100 * time.Millisecond
	cfg.Worker.Consumer = t.Name()
	cfg.Server.ShutdownTimeout = 10 * time.Second
	if o.mutate != nil {
		o.mutate(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	s := &service{t: t, cfg: cfg, redis: o.redis, rdb: rdb, done: make(chan error, 1)}
	s.pushes = subscribe(t, s.rdb)

	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	ready := make(chan started, 1)
	log := o.log
	if log == nil {
		log = testLogger(t)
	}
	go func() { s.done <- run(ctx, cfg, log, ready) }()
	s.addrs = awaitStart(t, ready, s.done)
	s.rpc = newRPC(t, s.addrs.RPCAddr)
	s.waitServing()
	t.Cleanup(func() { s.stop() })
	return s
}

// awaitStart returns what run signals once it serves, failing t with
// run's error if it returned first, or after 10 s.
func awaitStart(t testing.TB, ready <-chan started, done <-chan error) started {
	t.Helper()
	select {
	case st := <-ready:
		return st
	case err := <-done:
		t.Fatalf("service did not start: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("service did not start within 10s")
	}
	return started{}
}

// waitServing returns once the RPC server has answered a call, whatever
// its answer. run signals ready before Kitex's Run, whose server starts
// serving on a goroutine of its own; a test that stopped the service at
// once raced Kitex's Shutdown against that start (a data race inside
// kitex v0.16.3's netpoll transServer, seen under -race).
func (s *service) waitServing() {
	s.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := s.rpc.MergeLatest(context.Background(), &combo.MergeLatestRequest{ActivityId: 1, Limit: 1})
		var ce *combo.ComboError
		if err == nil || errors.As(err, &ce) {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("the RPC server answered no call within 10 s: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// httpGet is the tests' client of the metrics port: a handler that hung
// fails its test after 10 s, where http.Get would wait until go test's
// timeout, which names no test.
var httpGet = (&http.Client{Timeout: 10 * time.Second}).Get

// readyz returns /readyz's status and body.
func readyz(t *testing.T, s *service) (int, string) {
	t.Helper()
	resp, err := httpGet("http://" + s.addrs.MetricsAddr + "/readyz")
	if err != nil {
		t.Fatalf("/readyz: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// scrape returns the service's /metrics text.
func scrape(t *testing.T, s *service) string {
	t.Helper()
	resp, err := httpGet("http://" + s.addrs.MetricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}

// dialTLS sets the service to dial a Redis that takes only TLS, with a
// client certificate of its CA (pki nil: plain TCP).
func dialTLS(cfg *conf.Config, pki *testredis.TLSFiles) {
	if pki != nil {
		cfg.Redis.TLS = true
		cfg.Redis.TLSCAFile, cfg.Redis.TLSCertFile, cfg.Redis.TLSKeyFile = pki.CA, pki.ClientCert, pki.ClientKey
	}
}

// stop cancels the service as SIGTERM would and returns run's error.
func (s *service) stop() error {
	if s.cancel == nil {
		return nil
	}
	s.cancel()
	s.cancel = nil
	select {
	case err := <-s.done:
		return err
	case <-time.After(20 * time.Second):
		s.t.Fatal("service did not stop within 20s")
		return nil
	}
}

func (s *service) report(c *combo.Contribution) *combo.ReportContributionResponse {
	s.t.Helper()
	resp, err := s.rpc.ReportContribution(context.Background(), &combo.ReportContributionRequest{Contribution: c})
	if err != nil {
		s.t.Fatalf("ReportContribution(%d): %v", c.Id, err)
	}
	return resp
}

// comboErr calls fn and returns the ComboError it must fail with.
func comboErr(t *testing.T, err error) *combo.ComboError {
	t.Helper()
	var ce *combo.ComboError
	if !errors.As(err, &ce) {
		t.Fatalf("want a *combo.ComboError, got %T %v", err, err)
	}
	return ce
}

// received is one push as the gateway would see it.
type received struct {
	at      time.Time
	channel string
	msg     push.Message
	raw     string
}

type pushLog struct {
	mu   sync.Mutex
	all  []received
	cond chan struct{}
	t    *testing.T
}

func subscribe(t *testing.T, rdb redis.UniversalClient) *pushLog {
	t.Helper()
	ctx := context.Background()
	sub := rdb.PSubscribe(ctx, push.ChannelPattern)
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatalf("psubscribe: %v", err)
	}
	p := &pushLog{cond: make(chan struct{}, 1), t: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m := range sub.Channel(redis.WithChannelSize(10000)) {
			msg, err := push.Decode([]byte(m.Payload))
			if err != nil {
				t.Errorf("undecodable push on %s: %v: %s", m.Channel, err, m.Payload)
				continue
			}
			p.mu.Lock()
			p.all = append(p.all, received{at: time.Now(), channel: m.Channel, msg: msg, raw: m.Payload})
			p.mu.Unlock()
			select {
			case p.cond <- struct{}{}:
			default:
			}
		}
	}()
	t.Cleanup(func() {
		sub.Close()
		// The reader may call t.Errorf: it must end with the test.
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Error("the push reader still runs 5 s after its subscription closed")
		}
	})
	return p
}

// waitFor waits until match selects n pushes, and returns them; it fails
// after timeout.
func (p *pushLog) waitFor(n int, timeout time.Duration, match func(received) bool) []received {
	p.t.Helper()
	deadline := time.After(timeout)
	for {
		got := p.matching(match)
		if len(got) >= n {
			return got
		}
		select {
		case <-p.cond:
		case <-deadline:
			p.t.Fatalf("got %d pushes, want %d, within %s: %+v", len(got), n, timeout, got)
		}
	}
}

func (p *pushLog) matching(match func(received) bool) []received {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []received
	for _, r := range p.all {
		if match == nil || match(r) {
			out = append(out, r)
		}
	}
	return out
}

// quiet asserts nothing more matching arrives for d (used after the
// expected pushes, to catch a second publish of a window).
func (p *pushLog) quiet(d time.Duration, want int, match func(received) bool) {
	p.t.Helper()
	time.Sleep(d)
	if got := p.matching(match); len(got) != want {
		p.t.Fatalf("want exactly %d pushes, got %d: %+v", want, len(got), got)
	}
}

// inOneWindow runs report (a few reports of activity a, one after
// another) with a new activity until they were all answered within W of
// the first one's sending: then each reached Redis before the first one's
// window was due, and must have joined it. A host that stalls the test
// longer than that (a loaded CI machine) makes it try again rather than
// fail: with W = 200 ms, it had the window pushed between two reports.
func inOneWindow(t *testing.T, report func(a int64)) int64 {
	t.Helper()
	for range 5 {
		a := newActivity()
		start := time.Now()
		report(a)
		if time.Since(start) < testWindow {
			return a
		}
	}
	t.Fatalf("reports meant for one window took W (%s) or more, 5 times", testWindow)
	return 0
}

func forActivity(a int64) func(received) bool {
	return func(r received) bool { return r.msg.ActivityID == a }
}

// raw decodes a push's record into a generic map, for exactness checks.
func rawRecord(t *testing.T, r received) map[string]json.RawMessage {
	t.Helper()
	var m struct {
		Record map[string]json.RawMessage `json:"record"`
	}
	if err := json.Unmarshal([]byte(r.raw), &m); err != nil {
		t.Fatal(err)
	}
	return m.Record
}

func testLogger(t *testing.T) *zap.Logger { return zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)) }

func newRPC(t *testing.T, addr string) comboservice.Client {
	t.Helper()
	rpc, err := comboservice.NewClient("combo-service", client.WithHostPorts(addr), client.WithRPCTimeout(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return rpc
}

// checkConservation waits until the pushes matching match carry as much
// quantity as was reported, then checks it per key ("user|item_type") and
// that no window id was pushed twice, a late second push included: none
// may come for as long as a window left pending takes to be taken back
// (ClaimIdle, then the claimer's next scan, every ClaimIdle/2) and pushed.
func checkConservation(t *testing.T, p *pushLog, cfg conf.Config, timeout time.Duration, match func(received) bool, want map[string]int32) {
	t.Helper()
	total := int32(0)
	for _, q := range want {
		total += q
	}
	var got []received
	p.until(timeout, func(rs []received) bool {
		sum := int32(0)
		for _, r := range rs {
			sum += r.msg.Record.Quantity
		}
		got = rs
		return sum >= total
	}, match)
	p.quiet(cfg.Worker.ClaimIdle*3/2+cfg.Window.Size+cfg.Window.Grace+time.Second, len(got), match)
	byKey := map[string]int32{}
	ids := map[int64]bool{}
	for _, r := range got {
		if ids[r.msg.Record.ID] {
			t.Fatalf("window %d pushed twice", r.msg.Record.ID)
		}
		ids[r.msg.Record.ID] = true
		byKey[fmt.Sprintf("%d|%s", r.msg.Record.UserID, r.msg.Record.ItemType)] += r.msg.Record.Quantity
	}
	for k, q := range want {
		if byKey[k] != q {
			t.Errorf("key %s: pushed %d, reported %d", k, byKey[k], q)
		}
	}
	if len(byKey) != len(want) {
		t.Errorf("pushed %d keys, reported %d", len(byKey), len(want))
	}
}

// until waits for cond over the matching pushes, failing after timeout.
func (p *pushLog) until(timeout time.Duration, cond func([]received) bool, match func(received) bool) {
	p.t.Helper()
	deadline := time.After(timeout)
	for !cond(p.matching(match)) {
		select {
		case <-p.cond:
		case <-deadline:
			p.t.Fatalf("condition not met within %s", timeout)
		}
	}
}
