// Package repo is combo-service's Redis layer: the report and flush Lua
// scripts, the stream of windows waiting to close and its consumer group.
// It takes a redis.UniversalClient, so one Redis and a Redis Cluster run the
// same code.
package repo

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/combo-service/combo-service/push"
	"github.com/combo-service/combo-service/window"
)

// ErrUnavailable wraps every failure where Redis did not answer (refused,
// timed out, connection lost): callers get a fast UNAVAILABLE.
var ErrUnavailable = errors.New("redis unavailable")

// ErrNoStream is EnsureGroup's error when a shard's stream does not exist
// and Redis refuses to create it (OOM): nothing was ever enqueued there,
// so there is nothing to read either.
var ErrNoStream = errors.New("stream does not exist")

// ErrCallerGone wraps a Report whose caller's ctx ended while its reports
// waited for a pipeline: Redis may be fine, and they were not sent. (A
// call a pipeline already carries is answered by what that pipeline did,
// whenever its caller gives up: it may have counted the reports, opened
// windows or published them on their own.)
var ErrCallerGone = errors.New("caller gave up waiting")

// Settings are the window rule's and stream's parameters.
type Settings struct {
	Window  time.Duration // W
	Grace   time.Duration
	Dedupe  time.Duration
	Stale   time.Duration
	Timeout time.Duration // bound on one request path's Redis work
	Shards  int
	// ShardNodes numbers the Redis node that serves each shard (see
	// ShardNodes); nil, or not one per shard, puts all on one node, as on
	// one Redis. It sizes how many batches may run pipelines of their own
	// at once on each node, until RefreshShardNodes reads it anew.
	ShardNodes   []int
	StreamMaxLen int64
	// ExpiresEarly is how much sooner than its TTL this Redis may expire
	// a key: 0 for a Redis server, which never expires a key before its
	// time; the embedded Redis counts TTLs down a tick at a time. A flush
	// that finds a window's data missing takes it for expired (stale) from
	// the data's TTL less this and IDsAhead, and for evicted or deleted
	// (lost) before.
	ExpiresEarly time.Duration
	// ObservePipeline, if set, is called after each pipeline of the report
	// path with the reports it carried and how long it took (sending to
	// the last reply, retries included, and the publish of its degraded
	// reports, a second round trip, when some degrade). It shows how well
	// concurrent calls share round trips, and Redis's latency as the
	// service's reports see it.
	ObservePipeline func(reports int, took time.Duration)
	// OnPanic, if set, is called when a pipeline of the report path
	// panics (a bug, a hook of the Redis client), with the panic and the
	// stack where it was raised; the calls it carried fail with
	// ErrPipelinePanic, which says no more, so that the service logs and
	// counts the panic once and its callers do not get its text.
	OnPanic func(p any, stack []byte)
}

// Repo runs the service's Redis operations.
type Repo struct {
	rdb  redis.UniversalClient
	keys Keys
	set  Settings
	// delay is W + grace + 1 ms: a window is due this long after the
	// millisecond its stream id names. The id floors Redis's clock to the
	// millisecond, so the window's first report arrived up to 1 ms after
	// it; without the extra millisecond a window with window.grace 0 could
	// be published before W had passed since that arrival (CONTRACT §3).
	// All replicas must agree on it (and on W), as on the rest of the rule.
	delay time.Duration

	reports []*coalescer // one per shard
	// cluster: rdb is a Redis Cluster client (see guardResend).
	cluster bool
	// The report pipelines that run on their own are bounded per Redis
	// node (see slots.go); RefreshShardNodes swaps the table whole.
	slots atomic.Pointer[slotTable]

	// Script arguments that never change, formatted once.
	delayMs, ttlMs, staleMs, maxLen string
	expiredMs                       string // a window's age from which its data may have expired
	// bucketSec is a dedupe bucket's length: window.dedupe in whole seconds,
	// rounded up.
	bucketSec string
	windowMs  int64 // W
}

// IDsAhead is how far a stream entry's id may run ahead of Redis's clock
// when its window opens, for the flush's line between expired and deleted
// data: XADD keeps ids increasing, so after a step back of the clock, or a
// failover to a node whose clock is behind, a window's id is later than
// the time its data's TTL started, and the data expires that much before
// id + TTL. It is well inside the 10 s between window.stale + W + grace
// and the TTL; a deletion found in it is counted stale.
const IDsAhead = 5 * time.Second

// DedupeBucket is the length of the dedupe buckets that window.dedupe d
// makes: d rounded up to whole seconds, at least one. Replicas whose
// window.dedupe differ but round alike number their buckets alike.
func DedupeBucket(d time.Duration) time.Duration {
	return max((d+time.Second-1)/time.Second, 1) * time.Second
}

// New returns a Repo over rdb. It adds a hook to rdb under which go-redis
// never sends a XREADGROUP or XAUTOCLAIM twice (see sendOnce).
func New(rdb redis.UniversalClient, s Settings) *Repo {
	ms := func(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }
	// A window's record outlives its stale deadline a little, so the flush
	// that finds it stale can count it; then Redis reclaims the memory even
	// if no flush ever comes.
	ttl := s.Stale + s.Window + s.Grace + 10*time.Second
	r := &Repo{
		delay: s.Window + s.Grace + time.Millisecond,
		rdb:   rdb, keys: NewKeys(s.Shards), set: s,
		windowMs: window.SizeMillis(s.Window), bucketSec: strconv.FormatInt(int64(DedupeBucket(s.Dedupe)/time.Second), 10),
		delayMs: ms(s.Window + s.Grace + time.Millisecond), staleMs: ms(s.Stale),
		ttlMs: ms(ttl), expiredMs: ms(max(ttl-s.ExpiresEarly-IDsAhead, 0)),
		maxLen: strconv.FormatInt(s.StreamMaxLen, 10),
	}
	// One shared pipeline of small calls in flight: every call that arrives
	// while it is on the wire rides the next one, so under load each round
	// trip and each script call serves many RPCs (a second pipeline in
	// flight made them half as full and cost more CPU per report in the
	// service and in Redis, for no more throughput). Batches of 20 or more
	// go on their own. One per shard: a shard's keys all live on one
	// node, so on a Redis Cluster a pipeline never spans a dead master
	// and a live one (go-redis fails such a pipeline whole, live answers
	// included). With one shard, as by default, there is one.
	r.slots.Store(newSlotTable(rdb, s.Shards, s.ShardNodes))
	_, r.cluster = rdb.(*redis.ClusterClient)
	// Read and Claim must fail when an attempt may have delivered entries
	// whose reply was lost, not be sent again (see sendOnce).
	rdb.AddHook(sendOnce{})
	r.reports = make([]*coalescer, max(s.Shards, 1))
	for i := range r.reports {
		r.reports[i] = &coalescer{r: r, maxInFlight: 1, maxItems: 1000, bigCall: 20}
	}
	return r
}

// Keys is the key builder the repo uses.
func (r *Repo) Keys() Keys { return r.keys }

// LoadScripts loads the Lua scripts so pipelines can use EVALSHA. On a
// cluster go-redis loads them on every node, and fails if one fails. It is
// only a warm-up: a node without them answers NOSCRIPT, and the commands
// it refused are sent again with EVAL, which caches them on that node.
func (r *Repo) LoadScripts(ctx context.Context) error {
	// The readiness probe and the clock too: a user allowed EVALSHA but
	// not EVAL could otherwise run the reports and not the probe.
	for _, s := range []*redis.Script{reportScript, degradeScript, flushScript, writeProbeScript, timeScript} {
		if err := s.Load(ctx, r.rdb).Err(); err != nil {
			return wrap("repo.LoadScripts", err)
		}
	}
	return nil
}

// ScriptHashes is the SHA1 (hex, as EVALSHA takes it) of every Lua script
// the service runs on the embedded Redis, which runs these and no other
// (see main's onlyOwnScripts). forget.lua is not among them: its one
// caller, the settings watch, is not started with the embedded Redis.
func ScriptHashes() map[string]bool {
	out := map[string]bool{}
	for _, s := range []*redis.Script{reportScript, degradeScript, flushScript, writeProbeScript, timeScript, dropScript, pruneScript} {
		out[s.Hash()] = true
	}
	return out
}

// timeScript reads the clock of the node that holds a shard's keys: TIME
// itself has no key, and on a Redis Cluster goes to any node, whose clock
// may differ from the one that dates and flushes the shard's windows.
//
// KEYS[1]  the shard's stream (it only routes the call; it is not read)
// Returns TIME's two values: seconds and microseconds, as strings.
var timeScript = redis.NewScript(`return redis.call('TIME')`)

// Time is the clock of the Redis node holding shard's keys, the one clock
// that dates the shard's windows and decides when they are due, for every
// replica.
func (r *Repo) Time(ctx context.Context, shard int) (time.Time, error) {
	v, err := timeScript.Run(ctx, r.rdb, []string{r.keys.Stream(shard)}).Int64Slice()
	if err != nil {
		return time.Time{}, wrap("repo.Time", err)
	}
	if len(v) != 2 {
		return time.Time{}, fmt.Errorf("repo.Time: TIME answered %d values", len(v))
	}
	return time.Unix(v[0], v[1]*1000), nil
}

// writeProbeScript deletes a key that is never written: nothing changes
// (and nothing is replicated), but a read-only replica refuses it
// (READONLY), as it refuses every report. First it asks Redis whether this
// user may PUBLISH on the push channels: a user denied them (Redis 7 gives
// a new ACL user none: acl-pubsub-default resetchannels) takes every
// report and can push no window. Then whether it may run, on the service's
// keys, every command the scripts and the worker send: a user denied one
// (say XREADGROUP, or a subcommand such as XGROUP CREATE) may take every
// report and never flush a window, each loop failing in its log while the
// replica looked ready. redis.acl_check_cmd is Redis 7's and runs nothing;
// before 7, and on the embedded Redis, these checks are skipped.
//
// KEYS[1]  the shard's probe key (Keys.Probe), never written
// ARGV[1]  a push channel (act:1:contributions)
// Returns 0, the number of keys deleted, or NOPERM naming what is denied.
var writeProbeScript = redis.NewScript(writeProbeLua)

const writeProbeLua = `
if redis.acl_check_cmd then
  if not redis.acl_check_cmd('PUBLISH', ARGV[1], '') then
    return redis.error_reply('NOPERM this Redis user may not PUBLISH on ' .. ARGV[1] ..
      ' (it needs the command and the channels: ACL SETUSER <user> +publish &act:*): no window could be pushed')
  end
  local k = KEYS[1]
  -- Every command of report.lua, degrade.lua, flush.lua, prune.lua and the worker, on
  -- one of the service's keys; a subcommand's name is its second word.
  for _, c in ipairs({
    {'TIME'}, {'XADD', k, '*', 'k', 'v'}, {'XLEN', k}, {'SET', k, 'v'}, {'GET', k}, {'GETRANGE', k, '0', '63'},
    {'SETRANGE', k, '0', 'v'}, {'RENAME', k, k}, {'SADD', k, 'm'}, {'SREM', k, 'm'}, {'SISMEMBER', k, 'm'},
    {'EXPIREAT', k, '1'}, {'DEL', k}, {'XRANGE', k, '-', '+'}, {'XREVRANGE', k, '+', '-'},
    {'XACK', k, 'g', '0-1'}, {'XDEL', k, '0-1'}, {'XPENDING', k, 'g'},
    {'XREADGROUP', 'GROUP', 'g', 'c', 'STREAMS', k, '>'}, {'XAUTOCLAIM', k, 'g', 'c', '0', '0'},
    {'XGROUP', 'CREATE', k, 'g', '$', 'MKSTREAM'}, {'XGROUP', 'DELCONSUMER', k, 'g', 'c'},
    {'XINFO', 'GROUPS', k}, {'XINFO', 'CONSUMERS', k, 'g'},
  }) do
    if not redis.acl_check_cmd(unpack(c)) then
      local name = c[1]
      if name == 'XGROUP' or name == 'XINFO' then name = name .. ' ' .. c[2] end
      return redis.error_reply('NOPERM this Redis user may not run ' .. name .. ' on ' .. k ..
        ', which the service runs on its keys: windows could not be counted or pushed')
    end
  end
end
return redis.call('DEL', KEYS[1])`

// probeChannel stands for every push channel in the readiness probe.
var probeChannel = push.Channel(1)

// Ready checks that Redis can take this replica's reports: that a shard's
// node answers and takes writes. PING alone passes on a read-only replica
// (stale DNS after a failover), where every report fails and no window can
// be flushed, and on a Redis Cluster that refuses every key (CLUSTERDOWN,
// with the default cluster-require-full-coverage once a master is lost).
// A Redis that answers but refuses writes for its own state (OOM,
// MISCONF, NOREPLICAS) passes: its reports still go out, degraded, and
// every replica would see the same. Any other refusal fails it: a wrong
// password or a too-narrow ACL user (NOAUTH, WRONGPASS, NOPERM) fails
// every report, degraded ones included; so does a user denied the push
// channels, whose windows would all stay unpublished.
//
// On one node, shard 0's probe stands for all. On a Redis Cluster, one
// shard per master is probed, each on its own (go-redis fails a whole
// cluster pipeline when one node's part times out), and one that takes the
// write is enough: a dead master fails only its own shards' reports, fast
// (UNAVAILABLE), and must not take every replica out of rotation, and with
// it the live masters' shards.
func (r *Repo) Ready(ctx context.Context) error {
	cc, ok := r.rdb.(*redis.ClusterClient)
	if !ok {
		return wrap("repo.Ready", unready(writeProbeScript.Run(ctx, r.rdb, []string{r.keys.Probe(0)}, probeChannel).Err()))
	}
	byMaster := map[string]int{} // master address -> a shard it serves
	var errs []error
	seen := map[string]bool{} // one line per distinct failure
	fail := func(err error) {
		if !seen[err.Error()] {
			seen[err.Error()] = true
			errs = append(errs, err)
		}
	}
	for shard := range r.keys.Shards() {
		m, err := cc.MasterForKey(ctx, r.keys.Probe(shard))
		if err != nil {
			fail(err) // without the cluster's state, each shard tries to load it again
			if ctx.Err() != nil {
				break
			}
			continue
		}
		if _, seen := byMaster[m.Options().Addr]; !seen {
			byMaster[m.Options().Addr] = shard
		}
	}
	results := make(chan error, len(byMaster))
	for _, shard := range byMaster {
		go func() {
			results <- unready(writeProbeScript.Run(ctx, cc, []string{r.keys.Probe(shard)}, probeChannel).Err())
		}()
	}
	for range byMaster {
		err := <-results
		if err == nil {
			return nil // the other probes end by ctx, their results unread
		}
		fail(err)
	}
	if len(errs) == 0 {
		errs = append(errs, errors.New("no master known"))
	}
	return wrap("repo.Ready", errors.Join(errs...))
}

// unready is err unless it is a write refused for Redis's own state,
// which leaves reports degraded and the replica ready.
func unready(err error) error {
	if err != nil && !isUnavailable(err) && RefusesWrites(err) {
		return nil
	}
	return err
}

// degradingReplies refuse a write for Redis's state, not the caller's: the
// report script fails, and its report is published on its own (degraded).
var degradingReplies = []string{"OOM", "MISCONF", "NOREPLICAS"}

// RefusesWrites says err is Redis refusing a write for its own state (OOM,
// MISCONF, NOREPLICAS): every write fails alike until Redis recovers, so a
// loop retrying one should back off as a whole, not window by window.
func RefusesWrites(err error) bool {
	for _, p := range degradingReplies {
		if redis.HasErrorPrefix(err, p) {
			return true
		}
	}
	return false
}

// wrap names the operation and marks "Redis did not answer" failures with
// ErrUnavailable; replies Redis did send (script errors, WRONGTYPE, OOM)
// stay as they are.
func wrap(op string, err error) error { return wrapWithin(op, err, "") }

// wrapWithin is wrap for an operation whose every wait the setting within
// bounds, which its timeout then names. Only the report path's are known
// to be: its own ctx is redis.timeout. Elsewhere the caller's deadline
// may come first (/readyz's second, the worker's op timeout) or be all
// there is (a blocking XREADGROUP, which go-redis gives BLOCK + 10 s).
func wrapWithin(op string, err error, within string) error {
	if err == nil {
		return nil
	}
	if isUnavailable(err) {
		return &opError{op: op, err: err, unavailable: true, within: within}
	}
	return &opError{op: op, err: err}
}

// reportTimeout is the setting that bounds the report path's waits.
const reportTimeout = "redis.timeout"

type opError struct {
	op          string
	err         error
	unavailable bool
	within      string // the setting that bounds the wait, if known
}

func (e *opError) Error() string {
	if e.unavailable && timedOut(e.err) {
		// Alone, "context deadline exceeded" or "i/o timeout" names
		// neither Redis nor the setting that bounds the wait.
		wait := "no answer in time"
		if e.within != "" {
			wait += " (" + e.within + ")"
		}
		return e.op + ": " + ErrUnavailable.Error() + ": " + wait + ": " + e.err.Error()
	}
	if e.unavailable {
		return e.op + ": " + ErrUnavailable.Error() + ": " + e.err.Error()
	}
	return e.op + ": " + e.err.Error()
}

// timedOut: Redis (or the dial to it) did not answer before a deadline: a
// partition, a host gone without a reset, a Redis stalled.
func timedOut(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

func (e *opError) Unwrap() []error {
	if e.unavailable {
		return []error{ErrUnavailable, e.err}
	}
	return []error{e.err}
}

// isUnavailable: no reply from Redis at all (refused, timed out, closed),
// as opposed to an error reply. LOADING, MASTERDOWN, CLUSTERDOWN and
// TRYAGAIN are replies, but they too say the data cannot be reached now;
// so do READONLY (a demoted master: a PUBLISH there would not reach the
// subscribers of the new one) and BUSY (a script ran too long), whether
// they answer a command or a command inside a report script.
func isUnavailable(err error) bool {
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return true
	}
	msg := rerr.Error()
	var serr scriptError
	if errors.As(err, &serr) {
		msg = string(serr)
	}
	for _, p := range unavailableReplies {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	// flush.lua's BADWINDOW names its window's key, which holds the
	// caller's item_type: a refusal's words there are the caller's text.
	if strings.HasPrefix(msg, "BADWINDOW ") {
		return false
	}
	for _, s := range unavailableInScript {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// NOAUTH, WRONGPASS and Redis's refusal of a long request before AUTH
// ("ERR Protocol error: unauthenticated ...") say the command was refused
// unrun: this replica's credentials are wrong (its /readyz fails too), and
// another replica may take the report.
//
// MOVED and ASK are left on a command when go-redis has spent its
// redirects (redis.ClusterOptions.MaxRedirects): Redis did not run it,
// and said its keys are elsewhere now, as while a slot moves.
var unavailableReplies = []string{"LOADING ", "MASTERDOWN ", "CLUSTERDOWN ", "TRYAGAIN ", "READONLY ", "BUSY ",
	"NOAUTH ", "WRONGPASS ", "ERR Protocol error: unauthenticated ",
	"MOVED ", "ASK "}

// unavailableInScript: a Redis Cluster's refusals of a command inside a
// script, which are the script's CLUSTERDOWN, TRYAGAIN and ASK. Matched
// within the message: Redis prefixes them with ERR and the failing call's
// place in the script, and since 7.2 one names the command.
//
// A cluster that is down (a master lost, with Redis's default
// cluster-require-full-coverage) refuses EVALSHA itself, CLUSTERDOWN. With
// cluster-allow-reads-when-down yes it runs the script, which reads and
// is then refused its first write: nothing was written, and a report sent
// again once the cluster is up is counted, as after CLUSTERDOWN. (Read as
// a script's own failure, as it once was, the report degraded, its
// publish was refused the same way, and the call failed INTERNAL.)
//
// The others refuse a key the script did not declare (a dedupe set, a
// parked window) while the shard's slot moves to another master and that
// key has moved already or is not there yet, or when its slot is served
// by no one. The report did nothing, and the dedupe set that would say
// whether its id was counted is out of reach; published on its own
// (degraded), a retry of a counted report would be pushed twice. Since the
// scripts declare the probe key, Redis refuses them before they run
// during a move (TRYAGAIN) and on an unserved slot (CLUSTERDOWN); these
// stay as a guard. Redis 7.0 calls a key of a moving slot a non local
// key, and so does 7.2 (to 7.2.6 at least); 7.4 and later say the slot
// is rehashing.
//
// Valkey 9 runs Lua as a module, and its scripts' commands get the module
// API's refusals instead: "Can not execute a write command '<cmd>' while
// the cluster is down and readonly", "Can not execute a command '<cmd>'
// while the cluster is down", and, for a moving or unserved slot alike,
// "Attempted to access a non local key in a cluster node".
var unavailableInScript = []string{
	"Script attempted to execute a write command while the cluster is down",
	"Script attempted to execute a command while the cluster is down",
	"Script attempted to access a non local key",
	"undeclared keys were accessed during rehashing of the slot",
	"Script attempted to access a slot not served",
	"' while the cluster is down",
	"Attempted to access a non local key in a cluster node",
}

// pipelineError is the error of a pipeline as a whole, or nil when Exec's
// error is only one of its commands' own (which stays on that command).
// Redis not answering is the pipeline's. So is a connection whose set-up
// Redis refused (HELLO or AUTH: WRONGPASS; SELECT of a missing db):
// go-redis returns that from Exec and leaves every command with neither an
// error nor a reply, none of them sent, which read one by one looked like
// scripts that answered nothing ("want 3 values, got 0").
func pipelineError(cmds []redis.Cmder, err error) error {
	if err == nil || isUnavailable(err) {
		return err
	}
	for _, c := range cmds {
		if c.Err() != nil {
			return nil
		}
	}
	return notSentError{err}
}

// notSentError: Redis refused the connection before a pipeline's commands
// were sent. Nothing was written, so it is Redis unavailable to this
// replica (isUnavailable: it is no command's reply), named for what it is.
type notSentError struct{ err error }

func (e notSentError) Error() string {
	return "connection refused by Redis, nothing sent: " + e.err.Error()
}
