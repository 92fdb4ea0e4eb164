// Command combo-demo shows what combo-service does, against a running
// service: it simulates users tapping gifts on a fan-support page (bursts of
// one item, switching items, pauses longer than the window, several users,
// two activities), reports every tap with ReportContribution, and prints,
// live and side by side, the feed without merging (one item per tap, as the
// old feed showed it: "小明 送烟花 ×1") and the merged feed it receives on
// act:*:contributions ("小明 送烟花 ×3"). It ends with a summary and checks:
// every tap's quantity is in exactly one push, every window is pushed once,
// no push arrives before W after its window's first tap nor long after
// W + grace (by -window and -grace, which may differ from the service's),
// and MergeLatest (the poll path) merges the same taps into the same records.
//
//	go run .                                     # the service; note embedded_redis_addr in its log
//	go run ./cmd/combo-demo -redis 127.0.0.1:43219  # in a second terminal
//
// (Stop the service with Ctrl-C. Sent to the pid of `go run` alone, a
// SIGTERM stops only the go tool and leaves the service running.)
//
// It exits 1 if a check fails, 2 on bad flags or when it cannot reach the
// service or Redis, and 130 when interrupted (Ctrl-C, SIGTERM) with every
// check passed on what it covered: windows opened less than W + grace + 1 s
// before the interruption and not yet pushed were not late yet, and are left
// out.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/cloudwego/kitex/pkg/klog"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"go.uber.org/zap"

	"github.com/combo-service/combo-service/client"
	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/kitex_gen/combo/comboservice"
	"github.com/combo-service/combo-service/push"
)

type options struct {
	addr, redisAddr, redisPassword string
	window, grace, duration        time.Duration
	scenario, color                string
	activity                       int64
	seed                           uint64
}

func main() {
	// Kitex writes a warning per connection retry (up to 6 per call):
	// thinned to a line a second, on stderr.
	klog.SetLogger(client.KitexLogger(zap.Must(zap.NewProduction())))
	o, err := parseFlags(flag.CommandLine, os.Args[1:])
	if err != nil {
		// flag.CommandLine exits by itself on a bad flag: this is a
		// variable of the environment that does not parse.
		fmt.Fprintln(os.Stderr, "combo-demo:", err)
		os.Exit(2)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	code, err := run(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "combo-demo:", err)
	}
	os.Exit(code)
}

// parseFlags reads the command line args into options, with defaults
// from the environment.
func parseFlags(fs *flag.FlagSet, args []string) (options, error) {
	o := options{}
	fs.StringVar(&o.addr, "addr", "127.0.0.1:8888", "combo-service RPC address (host:port)")
	fs.StringVar(&o.redisAddr, "redis", envOr("COMBO_REDIS_ADDR", "127.0.0.1:6379"),
		"the Redis the service publishes on (default $COMBO_REDIS_ADDR); with the embedded Redis, the embedded_redis_addr the service logged")
	// No default value: the usage (-h, a mistyped flag) prints it. The
	// environment's is read after parsing instead.
	fs.StringVar(&o.redisPassword, "redis-password", "", "Redis password (default $COMBO_REDIS_PASSWORD)")
	window, windowErr := envDuration("COMBO_WINDOW_SIZE", 3*time.Second)
	grace, graceErr := envDuration("COMBO_WINDOW_GRACE", 200*time.Millisecond)
	fs.DurationVar(&o.window, "window", window,
		"the service's window.size W (default $COMBO_WINDOW_SIZE or 3s); paces the scenario and bounds when a push may arrive")
	fs.DurationVar(&o.grace, "grace", grace,
		"the service's window.grace (default $COMBO_WINDOW_GRACE or 200ms); with -window, bounds when a push may arrive")
	fs.StringVar(&o.scenario, "scenario", "script", "script: a fixed ~4 W story (about 15 s at W = 3s); random: seeded random taps for -duration")
	fs.DurationVar(&o.duration, "duration", 15*time.Second, "how long -scenario random taps")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of -scenario random")
	fs.Int64Var(&o.activity, "activity", 1001, "first activity id; the second is this + 1 (runs at the same time may share them: each run's users are its own)")
	fs.StringVar(&o.color, "color", "auto", "auto, always or never (auto: a terminal without NO_COLOR)")
	err := fs.Parse(args)
	if o.redisPassword == "" {
		o.redisPassword = os.Getenv("COMBO_REDIS_PASSWORD")
	}
	if err != nil {
		return o, err
	}
	// A variable that does not parse is refused, as the service refuses
	// it, unless its flag is given: a default of 3s or 200ms the service
	// does not use would fail the timing checks, or pass them wrongly.
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if windowErr != nil && !set["window"] {
		return o, fmt.Errorf("%w (or give -window)", windowErr)
	}
	if graceErr != nil && !set["grace"] {
		return o, fmt.Errorf("%w (or give -grace)", graceErr)
	}
	return o, nil
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// envDuration is the duration in the environment variable key, def if it
// is unset or empty, and an error naming key if it is no Go duration.
func envDuration(key string, def time.Duration) (time.Duration, error) {
	v := os.Getenv(key)
	if v == "" {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return def, fmt.Errorf("%s=%q: want a Go duration string such as \"500ms\" or \"3s\", as the service does", key, v)
	}
	return d, nil
}

// tap is one click as sent, with what the service answered.
type tap struct {
	c        *combo.Contribution
	at       time.Time
	windowID int64
	dup      bool
	degraded bool
	err      error
}

// win is one window as the demo sees it: the taps the service put in it
// (by the window_id it answered) and the pushes that carried it.
type win struct {
	id       int64
	activity int64
	firstAt  time.Time // its first tap's at
	taps     int
	qty      int64
	degraded bool // published on its own at once: no window timing
	pushes   []push.Record
	pushedAt time.Time // when its first push arrived
	// misrouted counts its pushes on another activity's channel, or
	// naming another activity: the gateway would show them on the wrong
	// page, or never.
	misrouted int
}

// lateSlack is how much later than W + grace a push may arrive before the
// run fails: the contract's bound under normal load is W + grace + 100 ms,
// and a demo shares its machine with the service, Redis and a terminal.
const lateSlack = time.Second

// timing is when a window's push may arrive after its first tap, by the
// window and grace the demo was told (-window, -grace), which may differ
// from the service's own.
type timing struct{ w, grace time.Duration }

// early says whether a push after d is before the window could close. A
// tap's at is read before the RPC, so the service's arrival time is later
// and a correct push lands at least W after it; but the service reads
// arrival in whole milliseconds, which can put it up to 1 ms earlier.
func (tm timing) early(d time.Duration) bool { return d < tm.w-time.Millisecond }

// slow says whether a push after d missed the contract's normal-load bound;
// late, whether it missed even the demo's generous one.
func (tm timing) slow(d time.Duration) bool { return d > tm.w+tm.grace+100*time.Millisecond }
func (tm timing) late(d time.Duration) bool { return d > tm.lateBound() }
func (tm timing) lateBound() time.Duration  { return tm.w + tm.grace + lateSlack }

type state struct {
	tm   timing
	mu   sync.Mutex
	ours map[int64]bool // every contribution id this run sends
	// inFlight is the taps sent and not answered yet, by id: a degraded
	// report is published before its RPC answers, and its push must find
	// its tap's at.
	inFlight map[int64]*tap
	taps     []*tap
	wins     map[int64]*win
	ignored  int // pushes of windows this run did not open
	// userBase is added to the scenario's user ids, which are the same in
	// every run, to make this run's combo keys its own.
	userBase int64
	pushed   chan struct{}
}

func run(ctx context.Context, o options) (int, error) {
	if o.window < 10*time.Millisecond {
		return 2, fmt.Errorf("-window must be >= 10ms, got %s", o.window)
	}
	if o.grace < 0 {
		return 2, fmt.Errorf("-grace must be >= 0, got %s", o.grace)
	}
	if o.activity <= 0 || o.activity == 1<<63-1 {
		return 2, fmt.Errorf("-activity must be > 0, got %d", o.activity)
	}
	colour, err := useColor(o.color, os.Stdout)
	if err != nil {
		return 2, err
	}
	a1, a2 := o.activity, o.activity+1
	var script []click
	switch o.scenario {
	case "script":
		script = scripted(a1, a2, o.window, o.grace)
	case "random":
		if o.duration <= 0 {
			return 2, fmt.Errorf("-duration must be > 0, got %s", o.duration)
		}
		script = random(a1, a2, o.window, o.duration, o.seed)
	default:
		return 2, fmt.Errorf("-scenario must be script or random, got %q", o.scenario)
	}
	if len(script) == 0 {
		// Each user's first tap falls within the first second: a short
		// -duration can leave none, and there is nothing to show or check.
		return 2, fmt.Errorf("-scenario random -duration %s -seed %d gives no taps (every user's first tap falls after -duration): "+
			"use a longer -duration or another -seed", o.duration, o.seed)
	}

	// A failure once ctx ended is the interruption's, not the address's:
	// Ctrl-C while a PING waited said "cannot reach Redis: context
	// canceled", sending the user to check -redis, and exited 2.
	unreached := func(err error) (int, error) {
		if ctx.Err() != nil {
			return 130, errors.New("interrupted while starting, before any tap")
		}
		return 2, err
	}
	// Subscribe first and wait for Redis to confirm, so no push is missed.
	rdb := redis.NewClient(redisOptions(o.redisAddr, o.redisPassword))
	defer rdb.Close()
	pingCtx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := rdb.Ping(pingCtx).Err(); err != nil {
		hint := "-redis must be the Redis the service publishes on; with its embedded Redis, the embedded_redis_addr it logged at start"
		if redis.HasErrorPrefix(err, "NOAUTH") || redis.HasErrorPrefix(err, "WRONGPASS") {
			// The address answered: the password is what is wrong.
			hint = "-redis-password (or COMBO_REDIS_PASSWORD) must be the password of Redis's default user, as whom " +
				"the demo logs in: the service's redis.password when it sets no redis.username (README's ACL user " +
				"for the service may not PSUBSCRIBE, which the demo does)"
		}
		return unreached(fmt.Errorf("cannot reach Redis at %s: %w\n  %s", o.redisAddr, err, hint))
	}
	sub := rdb.PSubscribe(ctx, push.ChannelPattern)
	defer sub.Close()
	if _, err := sub.Receive(pingCtx); err != nil {
		return unreached(fmt.Errorf("PSUBSCRIBE %s on %s: %w", push.ChannelPattern, o.redisAddr, err))
	}

	cli, err := client.NewClient([]string{o.addr})
	if err != nil {
		return 2, err
	}
	// MergeLatest is pure (no Redis): an empty one only proves the service answers.
	if _, err := cli.MergeLatest(pingCtx, &combo.MergeLatestRequest{ActivityId: a1}); err != nil {
		return unreached(fmt.Errorf("cannot reach combo-service at %s: %w\n  -addr must be the service's RPC address (its server.addr, COMBO_SERVER_ADDR, :8888 by default)", o.addr, err))
	}

	b := &board{out: os.Stdout, st: style{on: colour}, left: leftWidth(script)}
	st := newState(timing{o.window, o.grace})
	last := script[len(script)-1].At
	b.plain("%s", b.st.bold(fmt.Sprintf("combo-demo: %d taps by %d users in activities %d and %d over %.1fs; RPC %s, pushes from Redis %s, W = %s",
		len(script), countUsers(script), a1, a2, last.Seconds(), o.addr, o.redisAddr, o.window)))
	b.plain("%s", b.st.dim("left: the feed without merging (one item per tap); right: the merged pushes on "+push.ChannelPattern+", as they arrive"))
	b.plain("")
	b.header()

	b.start = time.Now()
	base := runBase(b.start)
	// Each run's users are its own, so are its combo keys: runs at the same
	// time (docker-compose up, then docker-compose run demo) would otherwise
	// join each other's windows and both fail against a correct service.
	st.userBase = base
	for i := range script {
		st.ours[base+int64(i)] = true
	}
	go st.receive(sub, b)
	watchdog := time.AfterFunc(o.window+3*time.Second, func() {
		if st.windowsPushed() == 0 {
			b.plain("%s", b.st.red(fmt.Sprintf("         │ no push yet, %s after the first tap: is %s the Redis the service uses (-redis)?", o.window+3*time.Second, o.redisAddr)))
		}
	})
	defer watchdog.Stop()

	for i, k := range script {
		if !sleepUntil(ctx, b.start.Add(k.At)) {
			break
		}
		if k.Note != "" {
			b.note(time.Now(), k.Note)
		}
		st.send(ctx, cli, b, k, base+int64(i))
	}

	// Wait for the last windows: published W (+ grace) after they opened;
	// a push later than the late bound still shows up, to be called late.
	deadline := st.lastOpen().Add(max(o.window+max(o.window, 2*time.Second), st.tm.lateBound()+500*time.Millisecond))
	interrupted := ctx.Err() != nil
	if !interrupted {
		b.note(time.Now(), sentNote(time.Until(deadline)))
	}
	for !interrupted && !st.complete() && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			interrupted = true
		case <-st.pushed:
		case <-time.After(time.Until(deadline)):
		}
	}
	// A short grace for a push published twice, which would show up now.
	if !interrupted {
		sleepUntil(ctx, time.Now().Add(300*time.Millisecond))
	}
	_ = sub.Close()
	var interruptedAt time.Time
	if interrupted {
		interruptedAt = time.Now()
	}

	pollCtx, cancelPoll := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancelPoll()
	ok := st.summary(pollCtx, cli, b, o, time.Since(b.start), []int64{a1, a2}, interruptedAt)
	return verdict(ok, interrupted)
}

// verdict is the exit code: a failed check outranks the interruption, which
// must not read as a failure (1) nor as a complete run (0).
func verdict(ok, interrupted bool) (int, error) {
	switch {
	case !ok:
		return 1, errors.New("a check failed (see the summary)")
	case interrupted:
		return 130, errors.New("interrupted: the checks passed on what was covered (see the summary)")
	}
	return 0, nil
}

func sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}

func countUsers(s []click) int {
	seen := map[int64]bool{}
	for _, k := range s {
		seen[k.User.ID] = true
	}
	return len(seen)
}

// leftWidth fits the widest tap of the scenario, within reason.
func leftWidth(s []click) int {
	w := cells("without merging")
	for _, k := range s {
		w = max(w, cells(feedText(k.Activity, k.User.Nick, k.Item.Name, int64(k.Qty))))
	}
	return min(w+2, 48)
}

// feedText is one feed item as the frontend shows it.
func feedText(activity int64, nick, itemName string, qty int64) string {
	return fmt.Sprintf("[%d] %s 送%s ×%d", activity, nick, itemName, qty)
}

func newState(tm timing) *state {
	return &state{tm: tm, ours: map[int64]bool{}, inFlight: map[int64]*tap{}, wins: map[int64]*win{}, pushed: make(chan struct{}, 1)}
}

func (st *state) send(ctx context.Context, cli comboservice.Client, b *board, k click, id int64) {
	uid := st.userBase + k.User.ID
	c := &combo.Contribution{
		Id: id, ActivityId: k.Activity, UserId: uid, StarId: k.Activity % 1000,
		ItemId: k.Item.ID, ItemType: k.Item.Type, ItemName: k.Item.Name,
		ItemIcon:  "https://cdn.example.com/gift/" + k.Item.Type + ".png",
		Nickname:  k.User.Nick,
		AvatarUrl: "https://cdn.example.com/avatar/" + strconv.FormatInt(uid, 10) + ".png",
		Quantity:  k.Qty,
		CreatedAt: time.Now().UnixMilli(),
	}
	t := &tap{c: c, at: time.Now()}
	st.mu.Lock()
	st.inFlight[c.Id] = t
	st.mu.Unlock()
	// Not cancelled by Ctrl-C: a tap already sent is counted by the service,
	// so its answer is awaited rather than reported as a failure.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	resp, err := cli.ReportContribution(rctx, &combo.ReportContributionRequest{Contribution: c})
	cancel()
	note := ""
	st.mu.Lock()
	delete(st.inFlight, c.Id)
	switch {
	case err != nil:
		t.err = err
		// Not "not counted": a tap whose answer timed out may have been.
		note = "FAILED: " + err.Error()
	case resp.Duplicate:
		t.dup = true
		note = "duplicate id: not counted"
	default:
		t.windowID = resp.WindowId
		if resp.Degraded || t.windowID == 0 {
			t.degraded = resp.Degraded
			t.windowID = c.Id // published on its own, under its own id
			if resp.Degraded {
				note = "degraded: published on its own"
			}
		}
		w := st.wins[t.windowID]
		if w == nil {
			w = &win{id: t.windowID, activity: c.ActivityId, firstAt: t.at}
			st.wins[t.windowID] = w
		}
		w.taps++
		w.qty += int64(c.Quantity)
		w.degraded = w.degraded || t.degraded
	}
	st.taps = append(st.taps, t)
	st.mu.Unlock()
	b.click(t.at, feedText(c.ActivityId, c.Nickname, c.ItemName, int64(c.Quantity)), note)
}

// sentNote is the line once every tap is sent, wait before the last
// window's deadline: none is left to wait for when the last taps failed
// (their windows never opened), and "up to -4.4s" said nothing.
func sentNote(wait time.Duration) string {
	if wait <= 0 {
		return "all taps sent"
	}
	return fmt.Sprintf("all taps sent; waiting for the last windows (up to %.1fs)", wait.Seconds())
}

// receive prints and records every push until the subscription closes.
func (st *state) receive(sub *redis.PubSub, b *board) {
	for m := range sub.ChannelWithSubscriptions() {
		switch m := m.(type) {
		case *redis.Message:
			st.onPush(b, m.Channel, m.Payload, time.Now())
		case *redis.Subscription:
			if m.Kind == "psubscribe" {
				// go-redis lost the connection and subscribed again:
				// pushes published meanwhile are lost to this subscriber
				// (Channel() would say nothing). A gateway polls
				// MergeLatest here (README: For the gateway); the demo
				// says so, and its summary names the windows missed.
				b.note(time.Now(), "subscribed again to "+m.Channel+" after a lost connection: pushes published "+
					"meanwhile are lost here (a gateway polls MergeLatest now)")
			}
		}
	}
}

// onPush prints and records one push that arrived at now.
func (st *state) onPush(b *board, channel, payload string, now time.Time) {
	m, err := push.Decode([]byte(payload))
	if err != nil {
		b.merged(now, "undecodable push on "+channel, err.Error())
		return
	}
	r := m.Record
	st.mu.Lock()
	if !st.ours[r.ID] {
		st.ignored++
		st.mu.Unlock()
		return // another client's window, or an earlier run's
	}
	w := st.wins[r.ID]
	if w == nil {
		// The push beat the RPC answer: a degraded report is published at
		// once. The window's first tap is the one whose id it carries.
		// Its activity is the tap's, not the push's: a push naming
		// another activity must count as misrouted here too.
		first, activity := now, m.ActivityID
		if t := st.inFlight[r.ID]; t != nil {
			first, activity = t.at, t.c.ActivityId
		}
		w = &win{id: r.ID, activity: activity, firstAt: first}
		st.wins[r.ID] = w
	}
	w.pushes = append(w.pushes, r)
	if len(w.pushes) == 1 {
		w.pushedAt = now
	}
	misrouted := m.ActivityID != w.activity || channel != push.Channel(w.activity)
	if misrouted {
		w.misrouted++
	}
	after := now.Sub(w.firstAt)
	detail := fmt.Sprintf("%d tap%s, pushed %.2fs after the first", w.taps, plural(w.taps), after.Seconds())
	problem := ""
	switch {
	case w.taps == 0:
		// No answer yet to compare with: the summary checks it, answered.
		detail = "pushed before the service answered (degraded?)"
	case len(w.pushes) > 1:
		problem = fmt.Sprintf("PUSHED %d TIMES", len(w.pushes))
	case int64(r.Quantity) != w.qty:
		problem = fmt.Sprintf("expected ×%d", w.qty)
	case misrouted:
		problem = "on the wrong channel " + channel
	case !w.degraded && st.tm.early(after):
		problem = fmt.Sprintf("EARLY: before W = %s", st.tm.w)
	case !w.degraded && st.tm.late(after):
		problem = fmt.Sprintf("LATE: after W + grace + %s = %s", lateSlack, st.tm.lateBound())
	}
	st.mu.Unlock()
	if problem != "" {
		detail = b.st.red(problem) + ": " + detail
	}
	b.merged(now, feedText(m.ActivityID, r.Nickname, r.ItemName, int64(r.Quantity)), detail)
	select {
	case st.pushed <- struct{}{}:
	default:
	}
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// runBase is the first contribution id of a run started at start; its taps
// take the ids after it, and its users are offset by it too. Runs started a
// millisecond apart get bases a million apart, so two runs' ids and users
// never meet unless one taps a million times (a random run of days).
func runBase(start time.Time) int64 { return start.UnixMilli() * 1_000_000 }

// redisOptions are the demo's Redis client's: no CLIENT SETINFO or CLIENT
// MAINT_NOTIFICATIONS on connect, which go-redis sends by default and a
// Redis without them refuses (7.0 both; each a line in INFO errorstats),
// as the service's own clients send neither.
func redisOptions(addr, password string) *redis.Options {
	return &redis.Options{
		Addr: addr, Password: password, DialTimeout: 2 * time.Second,
		DisableIdentity:          true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	}
}

func (st *state) windowsPushed() int {
	st.mu.Lock()
	defer st.mu.Unlock()
	n := 0
	for _, w := range st.wins {
		if len(w.pushes) > 0 {
			n++
		}
	}
	return n
}

func (st *state) complete() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, w := range st.wins {
		if len(w.pushes) == 0 {
			return false
		}
	}
	return true
}

func (st *state) lastOpen() time.Time {
	st.mu.Lock()
	defer st.mu.Unlock()
	var t time.Time
	for _, w := range st.wins {
		if w.firstAt.After(t) {
			t = w.firstAt
		}
	}
	if t.IsZero() {
		t = time.Now()
	}
	return t
}
