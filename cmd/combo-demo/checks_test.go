package main

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cloudwego/kitex/client/callopt"

	"github.com/combo-service/combo-service/internal/testredis"
	"github.com/combo-service/combo-service/internal/testwait"
	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/push"
	"github.com/combo-service/combo-service/window"
)

// fakeService answers ReportContribution with report (by default: every
// tap a window of its own) and MergeLatest by the contract's window rule,
// as the service does; it needs no Redis, so the checks can be fed pushes
// at chosen times.
type fakeService struct {
	w      time.Duration
	report func(c *combo.Contribution) (*combo.ReportContributionResponse, error)
	merges int
}

func (f *fakeService) ReportContribution(_ context.Context, req *combo.ReportContributionRequest, _ ...callopt.Option) (*combo.ReportContributionResponse, error) {
	if f.report != nil {
		return f.report(req.Contribution)
	}
	c := req.Contribution
	return &combo.ReportContributionResponse{WindowId: c.Id, WindowQuantity: c.Quantity}, nil
}

func (f *fakeService) ReportContributions(context.Context, *combo.ReportContributionsRequest, ...callopt.Option) (*combo.ReportContributionsResponse, error) {
	return nil, errors.New("the demo does not batch")
}

func (f *fakeService) MergeLatest(_ context.Context, req *combo.MergeLatestRequest, _ ...callopt.Option) (*combo.MergeLatestResponse, error) {
	if len(req.Records) > 10000 {
		return nil, errors.New("records: must hold at most 10000 items")
	}
	f.merges++
	rows := make([]window.Row, 0, len(req.Records))
	for _, r := range req.Records {
		rows = append(rows, window.Row{ID: r.Id, ActivityID: req.ActivityId, UserID: r.UserId, StarID: r.StarId, ItemID: r.ItemId,
			ItemType: r.ItemType, ItemName: r.ItemName, ItemIcon: r.ItemIcon, Nickname: r.Nickname, AvatarURL: r.AvatarUrl,
			Quantity: r.Quantity, CreatedAt: r.CreatedAt})
	}
	resp := &combo.MergeLatestResponse{}
	for _, m := range window.Merge(rows, f.w) {
		resp.Records = append(resp.Records, &combo.ContributionRecord{Id: m.ID, UserId: m.UserID, Nickname: m.Nickname,
			AvatarUrl: m.AvatarURL, StarId: m.StarID, ItemId: m.ItemID, ItemType: m.ItemType, ItemName: m.ItemName,
			ItemIcon: m.ItemIcon, Quantity: m.Quantity, ComboCount: m.Quantity, CreatedAt: m.CreatedAt})
	}
	return resp, nil
}

// session is one demo run without the network: taps go to a fakeService,
// pushes are handed to onPush at the times a test chooses.
type session struct {
	t   *testing.T
	st  *state
	b   *board
	out *strings.Builder
	svc *fakeService
	o   options
}

func newSession(t *testing.T, w, grace time.Duration) *session {
	out := &strings.Builder{}
	o := options{window: w, grace: grace, scenario: "test", redisAddr: "127.0.0.1:6379", activity: 1001}
	return &session{t: t, st: newState(timing{w, grace}), out: out, svc: &fakeService{w: w}, o: o,
		b: &board{out: out, start: time.Now(), left: 30}}
}

// tap sends one tap of user u (item fireworks, quantity 1) with id.
func (s *session) tap(id int64, u user) *tap {
	s.st.mu.Lock()
	s.st.ours[id] = true
	s.st.mu.Unlock()
	s.st.send(context.Background(), s.svc, s.b, click{Activity: 1001, User: u, Item: fireworks, Qty: 1}, id)
	return s.st.taps[len(s.st.taps)-1]
}

// push delivers the push of record r (of activity 1001) at time at.
func (s *session) push(r push.Record, at time.Time) {
	payload, err := json.Marshal(push.Message{ActivityID: 1001, Type: push.Type, Record: r})
	if err != nil {
		s.t.Fatal(err)
	}
	s.st.onPush(s.b, push.Channel(1001), string(payload), at)
}

// summary prints the summary of a run interrupted at interruptedAt (zero:
// a complete run).
func (s *session) summary(interruptedAt time.Time) bool {
	return s.st.summary(context.Background(), s.svc, s.b, s.o, time.Second, []int64{1001, 1002}, interruptedAt)
}

// A tap's at is read before the RPC, so a push less than W after it came
// before the window could close: the run fails. A push within W + grace +
// lateSlack passes; one later fails.
func TestPushTimingIsChecked(t *testing.T) {
	const w, grace = 3 * time.Second, 200 * time.Millisecond
	for _, c := range []struct {
		after         time.Duration
		ok            bool
		want, wantNot string
	}{
		{w / 2, false, "(1 early, 0 late)", ""},
		{w * 82 / 100, false, "(1 early, 0 late)", ""},
		{w - 500*time.Microsecond, true, "1/1 pushes between W and", "early"}, // arrival read in whole ms
		{w, true, "1/1 pushes between W and", "normal load"},
		{w + grace + 100*time.Millisecond, true, "1/1 pushes", "normal load"},
		{w + grace + 300*time.Millisecond, true, "1 pushes came later than W + grace + 100ms", ""},
		{w + grace + lateSlack + 100*time.Millisecond, false, "(0 early, 1 late)", ""}, // the bound is not rounded up
		{4800 * time.Millisecond, false, "(0 early, 1 late)", ""},
	} {
		s := newSession(t, w, grace)
		tp := s.tap(1, xiaoming)
		s.push(push.RecordOf(tp.c), tp.at.Add(c.after))
		ok := s.summary(time.Time{})
		out := s.out.String()
		if ok != c.ok || !strings.Contains(out, c.want) || (c.wantNot != "" && strings.Contains(out, c.wantNot)) {
			t.Errorf("push %s after the tap: summary %v, want %v with %q and without %q:\n%s", c.after, ok, c.ok, c.want, c.wantNot, out)
		}
		if !strings.Contains(out, "by -window 3s and -grace 200ms, as the demo was told") {
			t.Errorf("the summary does not say which W the timing was checked by:\n%s", out)
		}
	}
}

// Ctrl-C midway: a window opened just before cannot have been pushed yet,
// so it is left out rather than failed, no "no push at all" hint is given,
// and the exit code says interrupted (130), not failed (1). A window that
// was due and never pushed still fails the run.
func TestInterruptedRunLeavesOutWindowsNotDue(t *testing.T) {
	const w, grace = 3 * time.Second, 200 * time.Millisecond
	s := newSession(t, w, grace)
	a := s.tap(1, xiaoming)
	s.push(push.RecordOf(a.c), a.at.Add(w+50*time.Millisecond))
	b := s.tap(2, xiaohong) // interrupted 1 s after it: not due
	ok := s.summary(b.at.Add(time.Second))
	out := s.out.String()
	if !ok || !strings.Contains(out, "interrupted: 1 windows (1 taps)") || strings.Contains(out, "✗") ||
		!strings.Contains(out, "1/1 windows pushed exactly once") || !strings.Contains(out, "1/1 merged records identical") {
		t.Errorf("interrupted with a window not due: summary %v, want true and the window left out:\n%s", ok, out)
	}
	if code, _ := verdict(ok, true); code != 130 {
		t.Errorf("verdict of an interrupted run whose checks passed = %d, want 130", code)
	}

	s = newSession(t, w, grace)
	c := s.tap(3, lucy) // interrupted before any push: no hint that Redis is wrong
	if ok := s.summary(c.at.Add(time.Second)); !ok || strings.Contains(s.out.String(), "no push at all") {
		t.Errorf("interrupted before any push could be due: summary %v:\n%s", ok, s.out.String())
	}

	s = newSession(t, w, grace)
	d := s.tap(4, aqiang) // interrupted well after it was due: missing
	if ok := s.summary(d.at.Add(w + grace + lateSlack + time.Second)); ok || !strings.Contains(s.out.String(), "1 never pushed") {
		t.Errorf("interrupted after a window was due and not pushed: summary %v, want false:\n%s", ok, s.out.String())
	}
	if code, _ := verdict(false, true); code != 1 {
		t.Errorf("verdict of an interrupted run with a failed check = %d, want 1", code)
	}
}

// With Redis refusing writes, each report is published on its own before
// its RPC answers "degraded": its push is not flagged as carrying the wrong
// quantity, and the poll path, which would merge such taps, is not compared.
func TestDegradedReportsAreNotFlagged(t *testing.T) {
	const w, grace = 3 * time.Second, 200 * time.Millisecond
	s := newSession(t, w, grace)
	s.svc.report = func(c *combo.Contribution) (*combo.ReportContributionResponse, error) {
		s.push(push.RecordOf(c), time.Now()) // published at once, before the answer
		return &combo.ReportContributionResponse{WindowId: c.Id, WindowQuantity: c.Quantity, Degraded: true}, nil
	}
	s.tap(1, xiaoming)
	s.tap(2, xiaoming) // same key within W: the poll path merges the two
	ok := s.summary(time.Time{})
	out := s.out.String()
	if !ok || strings.Contains(out, "expected ×") || strings.Contains(out, "EARLY") ||
		!strings.Contains(out, "2 reports degraded: the service could not aggregate (Redis refusing writes?)") {
		t.Errorf("degraded reports: summary %v, want true, no push flagged, and the degraded count explained:\n%s", ok, out)
	}
}

// keyedService answers reports by the window rule per combo key, like the
// service: a report joins its key's open window when its created_at is
// within W of the window's anchor. It is shared by the runs of a test.
type keyedService struct {
	fakeService
	open map[window.Key]*combo.ReportContributionResponse
	at   map[window.Key]int64 // the open window's anchor
}

func newKeyedService(w time.Duration) *keyedService {
	k := &keyedService{fakeService: fakeService{w: w}, open: map[window.Key]*combo.ReportContributionResponse{}, at: map[window.Key]int64{}}
	k.report = func(c *combo.Contribution) (*combo.ReportContributionResponse, error) {
		key := window.Key{ActivityID: c.ActivityId, UserID: c.UserId, ItemType: c.ItemType}
		if r := k.open[key]; r != nil && c.CreatedAt < k.at[key]+w.Milliseconds() {
			r.WindowQuantity += c.Quantity
			return &combo.ReportContributionResponse{WindowId: r.WindowId, WindowQuantity: r.WindowQuantity}, nil
		}
		k.open[key] = &combo.ReportContributionResponse{WindowId: c.Id, WindowQuantity: c.Quantity}
		k.at[key] = c.CreatedAt
		return &combo.ReportContributionResponse{WindowId: c.Id, WindowQuantity: c.Quantity}, nil
	}
	return k
}

// Two runs on the same activity at once (docker-compose up runs the demo,
// then docker-compose run demo): each run's taps open windows of its own,
// so both pass against a correct service, each ignoring the other's pushes.
func TestConcurrentRunsKeepToTheirOwnWindows(t *testing.T) {
	const w, grace = 3 * time.Second, 200 * time.Millisecond
	svc := newKeyedService(w)
	a, b := newSession(t, w, grace), newSession(t, w, grace)
	a.svc, b.svc = &svc.fakeService, &svc.fakeService
	a.st.userBase, b.st.userBase = 1_000_000, 2_000_000 // as run sets it: from each run's base id
	ta := a.tap(1_000_000, xiaoming)
	tb := b.tap(2_000_000, xiaoming) // same user and item of the scenario, a moment later
	for _, tp := range []*tap{ta, tb} {
		r := push.RecordOf(tp.c)
		r.Quantity = svc.open[window.Key{ActivityID: 1001, UserID: tp.c.UserId, ItemType: "fireworks"}].WindowQuantity
		r.ComboCount = r.Quantity
		for _, s := range []*session{a, b} { // both runs subscribe to the channel
			s.push(r, tp.at.Add(w+10*time.Millisecond))
		}
	}
	for name, s := range map[string]*session{"first": a, "second": b} {
		if ok := s.summary(time.Time{}); !ok || !strings.Contains(s.out.String(), "1 pushes of windows this run did not open") {
			t.Errorf("the %s of two concurrent runs: summary %v, want true, ignoring the other's push:\n%s", name, ok, s.out.String())
		}
	}
}

// Over 10000 rows in one activity, the poll check asks MergeLatest in calls
// of whole combo keys, each within its limit, instead of failing "not
// checked".
func TestPollCheckSplitsByComboKey(t *testing.T) {
	const w = time.Hour // every tap of a key in one window, however slow the machine
	svc := newKeyedService(w)
	s := newSession(t, w, 200*time.Millisecond)
	s.svc = &svc.fakeService
	first := map[window.Key]*tap{}
	var keys []window.Key
	for i := range 10_050 {
		u := user{ID: int64(1 + i%67), Nick: "u"} // 67 keys of about 150 rows
		tp := s.tap(int64(1+i), u)
		k := window.Key{ActivityID: 1001, UserID: tp.c.UserId, ItemType: "fireworks"}
		if first[k] == nil {
			first[k] = tp
			keys = append(keys, k)
		}
	}
	for _, k := range keys {
		r := push.RecordOf(first[k].c)
		r.Quantity = svc.open[k].WindowQuantity
		r.ComboCount = r.Quantity
		s.push(r, first[k].at.Add(w))
	}
	ok := s.summary(time.Time{})
	if !ok || !strings.Contains(s.out.String(), "67/67 merged records identical") || svc.merges != 2 {
		t.Errorf("10050 rows of 67 keys: summary %v after %d MergeLatest calls, want true after 2:\n%s",
			ok, svc.merges, lastLines(s.out.String(), 12))
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// receive, through a real Redis: this run's pushes are recorded, other
// runs' ignored, an undecodable one shown; it returns when the subscription
// closes.
func TestReceiveThroughRedis(t *testing.T) {
	srv := testredis.Start(t, testredis.Options{})
	rdb := srv.Client()
	ctx := context.Background()
	sub := rdb.PSubscribe(ctx, push.ChannelPattern)
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatalf("PSUBSCRIBE %s: %v", push.ChannelPattern, err)
	}
	s := newSession(t, 3*time.Second, 200*time.Millisecond)
	tp := s.tap(1, xiaoming)
	done := make(chan struct{})
	go func() { s.st.receive(sub, s.b); close(done) }()

	other := push.RecordOf(tp.c)
	other.ID = 99 // a window this run did not open
	otherPayload, _ := json.Marshal(push.Message{ActivityID: 1001, Type: push.Type, Record: other})
	ours, _ := json.Marshal(push.Message{ActivityID: 1001, Type: push.Type, Record: push.RecordOf(tp.c)})
	for _, payload := range []string{string(otherPayload), "not json", string(ours)} {
		if err := rdb.Publish(ctx, push.Channel(1001), payload).Err(); err != nil {
			t.Fatalf("PUBLISH: %v", err)
		}
	}
	select { // one connection delivers in order: ours comes last
	case <-s.st.pushed:
	case <-time.After(10 * time.Second):
		t.Fatal("no push recorded within 10s")
	}
	_ = sub.Close()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("receive did not return after the subscription closed")
	}
	s.st.mu.Lock()
	w, ignored := s.st.wins[1], s.st.ignored
	s.st.mu.Unlock()
	if w == nil || len(w.pushes) != 1 || ignored != 1 || !strings.Contains(s.out.String(), "undecodable push on act:1001:contributions") {
		t.Errorf("after one push of ours, one of another run and one undecodable: window %+v, %d ignored:\n%s", w, ignored, s.out.String())
	}
}

// receive says when go-redis subscribed again after losing the
// connection (pushes published meanwhile are lost to it; a gateway polls
// then), and goes on recording pushes on the new connection.
func TestReceiveSaysWhenItSubscribedAgain(t *testing.T) {
	srv := testredis.Start(t, testredis.Options{})
	rdb := srv.Client()
	ctx := context.Background()
	sub := rdb.PSubscribe(ctx, push.ChannelPattern)
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatalf("PSUBSCRIBE %s: %v", push.ChannelPattern, err)
	}
	s := newSession(t, 3*time.Second, 200*time.Millisecond)
	tp := s.tap(1, xiaoming)
	go s.st.receive(sub, s.b)
	output := func() string {
		s.b.mu.Lock()
		defer s.b.mu.Unlock()
		return s.out.String()
	}
	if err := rdb.ClientKillByFilter(ctx, "TYPE", "pubsub").Err(); err != nil {
		t.Fatalf("CLIENT KILL TYPE pubsub: %v", err)
	}
	testwait.For(t, "a line saying the demo subscribed again after its connection was killed", func() bool {
		return strings.Contains(output(), "subscribed again to "+push.ChannelPattern)
	})
	ours, _ := json.Marshal(push.Message{ActivityID: 1001, Type: push.Type, Record: push.RecordOf(tp.c)})
	if err := rdb.Publish(ctx, push.Channel(1001), string(ours)).Err(); err != nil {
		t.Fatalf("PUBLISH: %v", err)
	}
	testwait.Receive(t, "a push recorded on the new connection", s.st.pushed)
}

// Runs started a millisecond apart never share a contribution id or a
// user, even when the first is a long random run: with a base of ms * 1000
// a run of over 1,000 taps took the next millisecond's ids.
func TestRunsAMillisecondApartShareNoIDs(t *testing.T) {
	start := time.Now()
	taps := random(1001, 1002, 3*time.Second, 90*time.Minute, 1)
	if len(taps) <= 1000 {
		t.Fatalf("a 90-minute random run has %d taps; the test needs over 1000", len(taps))
	}
	if last, next := runBase(start)+int64(len(taps)-1), runBase(start.Add(time.Millisecond)); last >= next {
		t.Errorf("a run of %d taps ends at id %d, at or past the base %d of a run started 1 ms later", len(taps), last, next)
	}
}

// A push on another activity's channel, or naming another activity, fails
// the run: the gateway would show it on the wrong page, or never. The
// live feed marked it, but every check of the summary passed.
func TestPushOnAnotherActivitysChannelFails(t *testing.T) {
	const w, grace = 3 * time.Second, 200 * time.Millisecond
	for name, deliver := range map[string]func(s *session, r push.Record, at time.Time){
		"another activity's channel": func(s *session, r push.Record, at time.Time) {
			payload, _ := json.Marshal(push.Message{ActivityID: 1001, Type: push.Type, Record: r})
			s.st.onPush(s.b, push.Channel(1002), string(payload), at)
		},
		"naming another activity": func(s *session, r push.Record, at time.Time) {
			payload, _ := json.Marshal(push.Message{ActivityID: 1002, Type: push.Type, Record: r})
			s.st.onPush(s.b, push.Channel(1001), string(payload), at)
		},
		// Failing two ways, the window is counted once: the count read -1/1.
		"another activity's channel, another quantity": func(s *session, r push.Record, at time.Time) {
			r.Quantity = 5
			payload, _ := json.Marshal(push.Message{ActivityID: 1002, Type: push.Type, Record: r})
			s.st.onPush(s.b, push.Channel(1002), string(payload), at)
		},
	} {
		s := newSession(t, w, grace)
		a := s.tap(1, xiaoming)
		deliver(s, push.RecordOf(a.c), a.at.Add(w+50*time.Millisecond))
		ok := s.summary(time.Time{})
		out := s.out.String()
		if ok || !strings.Contains(out, "0/1 windows pushed exactly once") || !strings.Contains(out, "1 on another activity's channel") {
			t.Errorf("%s: summary %v, want false, counting the window as misrouted:\n%s", name, ok, out)
		}
	}
}

// A push that beats its tap's answer (a degraded report, published at
// once) and names another activity on that activity's channel is
// misrouted too: the window's activity is the tap's, not the push's.
func TestPushBeforeTheAnswerNamingAnotherActivityFails(t *testing.T) {
	const w, grace = 3 * time.Second, 200 * time.Millisecond
	s := newSession(t, w, grace)
	s.svc.report = func(c *combo.Contribution) (*combo.ReportContributionResponse, error) {
		payload, _ := json.Marshal(push.Message{ActivityID: 1002, Type: push.Type, Record: push.RecordOf(c)})
		s.st.onPush(s.b, push.Channel(1002), string(payload), time.Now())
		return &combo.ReportContributionResponse{WindowId: c.Id, WindowQuantity: c.Quantity, Degraded: true}, nil
	}
	s.tap(1, xiaoming)
	ok := s.summary(time.Time{})
	out := s.out.String()
	if ok || !strings.Contains(out, "1 on another activity's channel") {
		t.Errorf("summary %v, want false, counting the window as misrouted:\n%s", ok, out)
	}
}

// Against a Redis that asks for a password the demo was not given, the
// error says so and names the flag, instead of sending the user to check
// -redis, whose address answered.
func TestMissingRedisPasswordNamesTheFlag(t *testing.T) {
	srv := testredis.Start(t, testredis.Options{})
	if err := srv.Client().ConfigSet(context.Background(), "requirepass", "s3cret").Err(); err != nil {
		t.Fatal(err)
	}
	t.Setenv("COMBO_REDIS_PASSWORD", "")
	o := options{addr: "127.0.0.1:1", redisAddr: srv.Addr, window: 3 * time.Second, grace: 200 * time.Millisecond,
		scenario: "script", activity: 1001, color: "never"}
	code, err := run(context.Background(), o)
	if code != 2 || err == nil || !strings.Contains(err.Error(), "NOAUTH") || !strings.Contains(err.Error(), "-redis-password") {
		t.Fatalf("run = %d, %v; want 2, naming NOAUTH and -redis-password", code, err)
	}
}

// A Redis that answers and a service that does not: the error names -addr,
// as the Redis one names -redis (netpoll's own words, "connection has been
// closed by peer", said nothing of where to look).
func TestUnreachableServiceNamesTheFlag(t *testing.T) {
	srv := testredis.Start(t, testredis.Options{})
	o := options{addr: "127.0.0.1:1", redisAddr: srv.Addr, window: 3 * time.Second, grace: 200 * time.Millisecond,
		scenario: "script", activity: 1001, color: "never"}
	code, err := run(context.Background(), o)
	if code != 2 || err == nil || !strings.Contains(err.Error(), "cannot reach combo-service at 127.0.0.1:1") ||
		!strings.Contains(err.Error(), "-addr must be the service's RPC address") {
		t.Fatalf("run = %d, %v; want 2, naming the address and -addr", code, err)
	}
}

// The poll check compares every field a push carries with the merged
// record's: a push differing from it in any one of them fails the check.
// Before, four of the twelve (avatar_url, star_id, item_id, item_icon)
// were not compared.
func TestPollCheckComparesEveryField(t *testing.T) {
	const w, grace = 3 * time.Second, 200 * time.Millisecond
	for _, c := range []struct {
		field  string
		change func(*push.Record)
	}{
		{"none", func(*push.Record) {}},
		{"id", func(r *push.Record) { r.ID++ }},
		{"user_id", func(r *push.Record) { r.UserID++ }},
		{"nickname", func(r *push.Record) { r.Nickname += "x" }},
		{"avatar_url", func(r *push.Record) { r.AvatarURL += "x" }},
		{"star_id", func(r *push.Record) { r.StarID++ }},
		{"item_id", func(r *push.Record) { r.ItemID++ }},
		{"item_type", func(r *push.Record) { r.ItemType += "x" }},
		{"item_name", func(r *push.Record) { r.ItemName += "x" }},
		{"item_icon", func(r *push.Record) { r.ItemIcon += "x" }},
		{"quantity", func(r *push.Record) { r.Quantity++ }},
		{"combo_count", func(r *push.Record) { r.ComboCount++ }},
		{"created_at", func(r *push.Record) { r.CreatedAt++ }},
	} {
		s := newSession(t, w, grace)
		tp := s.tap(1, xiaoming)
		r := push.RecordOf(tp.c)
		c.change(&r)
		s.push(r, tp.at.Add(w+50*time.Millisecond))
		s.summary(time.Time{})
		identical := strings.Contains(s.out.String(), "1/1 merged records identical")
		if identical != (c.field == "none") {
			t.Errorf("push differing in %s: poll check says identical %v:\n%s", c.field, identical, lastLines(s.out.String(), 8))
		}
	}
}

// checkLine is the summary line of the check labelled label.
func checkLine(t *testing.T, out, label string) string {
	t.Helper()
	for l := range strings.SplitSeq(out, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), label+" ") {
			return l
		}
	}
	t.Fatalf("no %q line in the summary:\n%s", label, out)
	return ""
}

// A window pushed twice, a window never pushed, and a window pushed with
// another quantity (more or less than its taps'), each on its own, fail the
// run, and the summary's windows line says which with ✗; the live feed
// flagged the push as it arrived.
func TestEveryWindowFailureFailsTheRun(t *testing.T) {
	const w, grace = 3 * time.Second, 200 * time.Millisecond
	for _, c := range []struct {
		name     string
		deliver  func(s *session, r push.Record, at time.Time)
		want     string // in the windows line
		wantLive string // in the live feed, "" for none
	}{
		{"pushed twice", func(s *session, r push.Record, at time.Time) {
			s.push(r, at)
			s.push(r, at.Add(10*time.Millisecond))
		}, "(0 never pushed, 1 pushed more than once, 0 with another quantity", "PUSHED 2 TIMES"},
		{"never pushed", func(*session, push.Record, time.Time) {},
			"(1 never pushed, 0 pushed more than once, 0 with another quantity", ""},
		{"pushed with more", func(s *session, r push.Record, at time.Time) {
			r.Quantity, r.ComboCount = 11, 11
			s.push(r, at)
		}, "(0 never pushed, 0 pushed more than once, 1 with another quantity", "expected ×10"},
		{"pushed with less", func(s *session, r push.Record, at time.Time) {
			r.Quantity, r.ComboCount = 9, 9
			s.push(r, at)
		}, "(0 never pushed, 0 pushed more than once, 1 with another quantity", "expected ×10"},
	} {
		s := newSession(t, w, grace)
		s.st.ours[1] = true
		s.st.send(context.Background(), s.svc, s.b, click{Activity: 1001, User: xiaohong, Item: heart, Qty: 10}, 1)
		tp := s.st.taps[0]
		c.deliver(s, push.RecordOf(tp.c), tp.at.Add(w+50*time.Millisecond))
		ok := s.summary(time.Time{})
		out := s.out.String()
		windows := checkLine(t, out, "windows")
		if ok || !strings.Contains(windows, "0/1 windows pushed exactly once") || !strings.Contains(windows, c.want) ||
			!strings.HasSuffix(windows, "✗") {
			t.Errorf("window %s: summary %v, want false and a windows line with %q and ✗:\n%s", c.name, ok, c.want, out)
		}
		if c.name != "never pushed" && !strings.HasSuffix(checkLine(t, out, "conservation"), "✗") {
			t.Errorf("window %s: conservation not marked ✗:\n%s", c.name, out)
		}
		if c.wantLive != "" && !strings.Contains(out, c.wantLive) {
			t.Errorf("window %s: the live feed does not say %q:\n%s", c.name, c.wantLive, out)
		}
	}
}

// The live feed marks an early push EARLY and a late one LATE as it
// arrives, and the push timing line is marked ✗.
func TestLiveFeedFlagsEarlyAndLatePushes(t *testing.T) {
	const w, grace = 3 * time.Second, 200 * time.Millisecond
	for _, c := range []struct {
		after time.Duration
		want  string
	}{
		{w / 2, "EARLY: before W = 3s"},
		{w + grace + lateSlack + 100*time.Millisecond, "LATE: after W + grace + 1s = 4.2s"},
	} {
		s := newSession(t, w, grace)
		tp := s.tap(1, xiaoming)
		s.push(push.RecordOf(tp.c), tp.at.Add(c.after))
		ok := s.summary(time.Time{})
		out := s.out.String()
		if ok || !strings.Contains(out, c.want) || !strings.HasSuffix(checkLine(t, out, "push timing"), "✗") {
			t.Errorf("push %s after the tap: summary %v, want false, %q live and push timing ✗:\n%s", c.after, ok, c.want, out)
		}
	}
}

// The exit status: 1 whenever a check failed, interrupted or not; 130
// for an interrupted run whose checks passed; 0 only for a complete run
// whose checks all passed.
func TestVerdictExitCodes(t *testing.T) {
	for _, c := range []struct {
		ok, interrupted bool
		code            int
	}{
		{true, false, 0},
		{false, false, 1},
		{false, true, 1},
		{true, true, 130},
	} {
		code, err := verdict(c.ok, c.interrupted)
		if code != c.code || (code == 0) != (err == nil) {
			t.Errorf("verdict(ok %v, interrupted %v) = %d, %v; want %d", c.ok, c.interrupted, code, err, c.code)
		}
	}
}

// emptyMerge answers MergeLatest with no record at all: a poll path that
// lost the rows.
type emptyMerge struct{ *fakeService }

func (emptyMerge) MergeLatest(context.Context, *combo.MergeLatestRequest, ...callopt.Option) (*combo.MergeLatestResponse, error) {
	return &combo.MergeLatestResponse{}, nil
}

// A MergeLatest that merges the taps into nothing fails the poll check:
// none of its records differs from a push, but a pushed window has no
// merged record ("0/0 identical" passed).
func TestPollCheckWithoutMergedRecordsFails(t *testing.T) {
	const w, grace = 3 * time.Second, 200 * time.Millisecond
	s := newSession(t, w, grace)
	tp := s.tap(1, xiaoming)
	s.push(push.RecordOf(tp.c), tp.at.Add(w))
	ok := s.st.summary(context.Background(), emptyMerge{s.svc}, s.b, s.o, time.Second, []int64{1001, 1002}, time.Time{})
	out := s.out.String()
	if poll := checkLine(t, out, "poll path (MergeLatest)"); ok || !strings.Contains(poll, "(1 windows were pushed)") || !strings.HasSuffix(poll, "✗") {
		t.Errorf("MergeLatest with no records, one window pushed: summary %v, want false and the poll line ✗:\n%s", ok, out)
	}
}
