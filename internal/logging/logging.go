// Package logging builds the service's zap logger and routes Kitex's klog
// into it, so one process writes one log format.
package logging

import (
	"context"
	"fmt"
	"strings"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// New builds the process logger: JSON for production, console for a
// developer's terminal.
func New(level, format string) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("logging.New: %w", err)
	}
	var cfg zap.Config
	if format == "console" {
		cfg = zap.NewDevelopmentConfig()
		cfg.Development = false
	} else {
		cfg = zap.NewProductionConfig()
		cfg.EncoderConfig.TimeKey = "ts"
		cfg.EncoderConfig.EncodeTime = zapcore.ISO8601TimeEncoder
		// "3.2s", not 3.2: a bare number does not say its unit.
		cfg.EncoderConfig.EncodeDuration = zapcore.StringDurationEncoder
	}
	cfg.Level = zap.NewAtomicLevelAt(lvl)
	// Sampling is applied where chosen, with Sampled, not globally: the
	// start-up and shutdown lines must all be written.
	cfg.Sampling = nil
	// No stack on error lines (zap's production default; warn in its
	// console one): they are events an operator acts on (a window lost, a
	// consumer group created again), not faults in the code, and a stack
	// of the loop's goroutine, 1 KB a line, tells the operator nothing. A
	// recovered panic's line carries its stack itself (zap.Stack).
	l, err := cfg.Build(zap.AddStacktrace(zapcore.FatalLevel))
	if err != nil {
		return nil, fmt.Errorf("logging.New: %w", err)
	}
	return l, nil
}

// Sampled returns a logger that writes the first occurrence of a message at
// info or above and then at most one per second, for background loops and
// request errors, which repeat by the thousand during a Redis outage (every
// request is also counted in a metric). Debug lines are never thinned: an
// operator who turns debug on asked for every one. Lines are told apart by
// their level and message, not their fields: what must not hide another
// line needs a message of its own.
//
// Each line left out is counted by suppressed, unless it is nil (the
// service counts them in combo_log_lines_suppressed_total).
func Sampled(l *zap.Logger, suppressed Suppressed) *zap.Logger {
	return sampled(l, suppressed, time.Now)
}

// sampled is Sampled timed by now.
func sampled(l *zap.Logger, suppressed Suppressed, now func() time.Time) *zap.Logger {
	dropped := func(zapcore.Entry) {}
	if suppressed != nil {
		suppressed(l.Name(), 0)
		dropped = func(e zapcore.Entry) { suppressed(e.LoggerName, 1) }
	}
	return l.WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core {
		return zapcore.NewTee(
			levelRange{c, zapcore.DebugLevel, zapcore.InfoLevel},
			newMessageSampler(levelRange{c, zapcore.InfoLevel, zapcore.InvalidLevel}, now, dropped),
		)
	}))
}

// messageSampler writes the first line of each level and message, then at
// most one a second, timed by the monotonic clock (keySampler). zap's own
// sampler times lines by their wall-clock time: a step back of the host's
// clock (NTP) held back every line it had seen in the last second for the
// length of the step, the loops' repeated errors through an outage among
// them.
type messageSampler struct {
	zapcore.Core
	// One sampler per level (keyed by message: no allocation per line),
	// shared by the cores With makes, as zap's counters are.
	byLevel *[zapcore.FatalLevel - zapcore.DebugLevel + 1]*keySampler
	dropped func(zapcore.Entry)
}

func newMessageSampler(c zapcore.Core, now func() time.Time, dropped func(zapcore.Entry)) messageSampler {
	s := messageSampler{c, new([zapcore.FatalLevel - zapcore.DebugLevel + 1]*keySampler), dropped}
	for i := range s.byLevel {
		s.byLevel[i] = newKeySampler()
		s.byLevel[i].now = now
	}
	return s
}

func (s messageSampler) With(fields []zapcore.Field) zapcore.Core {
	return messageSampler{s.Core.With(fields), s.byLevel, s.dropped}
}

func (s messageSampler) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if !s.Enabled(e.Level) {
		return ce
	}
	if i := int(e.Level - zapcore.DebugLevel); i >= 0 && i < len(s.byLevel) {
		ok, suppressed, since := s.byLevel[i].pass(e.Message)
		if !ok {
			s.dropped(e)
			return ce
		}
		if suppressed > 0 {
			// As Kitex's and netpoll's lines say it: the line that follows
			// a burst stands for the lines left out of it (71 windows
			// dropped stale in a second wrote one line, quantity 1).
			return s.Core.With([]zapcore.Field{zap.Int("suppressed_since_last", suppressed),
				zap.Time("suppressed_since", since)}).Check(e, ce)
		}
	}
	return s.Core.Check(e, ce)
}

// Suppressed counts the log lines a sampled logger left out: n more for
// the logger named logger ("" for an unnamed one). Sampled calls it with
// n = 0 as it builds a logger, so that the count exists, at 0, before the
// first line is left out.
type Suppressed func(logger string, n int)

// levelRange is c for the levels lo <= l < hi only.
type levelRange struct {
	zapcore.Core
	lo, hi zapcore.Level
}

func (r levelRange) Enabled(l zapcore.Level) bool {
	return l >= r.lo && l < r.hi && r.Core.Enabled(l)
}

func (r levelRange) With(fields []zapcore.Field) zapcore.Core {
	return levelRange{r.Core.With(fields), r.lo, r.hi}
}

func (r levelRange) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if !r.Enabled(e.Level) {
		return ce
	}
	return r.Core.Check(e, ce)
}

// Redis adapts a zap logger to go-redis's internal logger (pool dial
// failures and the like), sampled like the background loops: during an
// outage it would otherwise print a line per connection attempt. The
// lines left out are not counted: go-redis's logger is the process's, set
// before any metrics are.
func Redis(l *zap.Logger) RedisLogger {
	return RedisLogger{s: Sampled(l.Named("go-redis"), nil).Sugar()}
}

// RedisLogger implements go-redis's internal.Logging.
type RedisLogger struct{ s *zap.SugaredLogger }

// Printf logs at warn what went wrong, which is most of what go-redis
// logs, and at info the routine news of its Sentinel client: the master it
// found at start, a new master after a failover (the service warns of the
// failover itself, see sentinelWatch), a Sentinel learned of, another
// master's failover (Sentinels watching several masters). At warn, a
// healthy start printed two warnings an operator had nothing to do about.
func (r RedisLogger) Printf(_ context.Context, format string, v ...any) {
	for _, news := range redisNews {
		if strings.HasPrefix(format, news) {
			r.s.Infof(format, v...)
			return
		}
	}
	// go-redis asks every Sentinel for the master at once and cancels the
	// others when one answers; each canceled one says it "failed".
	if strings.HasPrefix(format, "sentinel: GetMasterAddrByName ") && strings.HasSuffix(fmt.Sprintf(format, v...), context.Canceled.Error()) {
		r.s.Infof(format, v...)
		return
	}
	r.s.Warnf(format, v...)
}

// redisNews are the prefixes of go-redis's log formats that say what
// happened, not what went wrong (go-redis v9's sentinel.go).
var redisNews = []string{"sentinel: selected addr=", "sentinel: new master=", "sentinel: discovered new sentinel=",
	"sentinel: ignore addr for master="}
