// Package logging builds the service's zap logger and routes Kitex's klog
// into it, so one process writes one log format.
package logging

import (
	"context"
	"fmt"
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
	}
	cfg.Level = zap.NewAtomicLevelAt(lvl)
	// Sampling is applied per loop with Sampled, not globally: request
	// errors must not be thinned silently.
	cfg.Sampling = nil
	l, err := cfg.Build()
	if err != nil {
		return nil, fmt.Errorf("logging.New: %w", err)
	}
	return l, nil
}

// Sampled returns a logger that writes the first occurrence of a message and
// then at most one per second, for background loops whose failures repeat
// (a Redis outage must not flood the log).
func Sampled(l *zap.Logger) *zap.Logger {
	return l.WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core {
		return zapcore.NewSamplerWithOptions(c, time.Second, 1, 0)
	}))
}

// Redis adapts a zap logger to go-redis's internal logger (pool dial
// failures and the like), sampled like the background loops: during an
// outage it would otherwise print a line per connection attempt.
func Redis(l *zap.Logger) RedisLogger { return RedisLogger{s: Sampled(l.Named("go-redis")).Sugar()} }

// RedisLogger implements go-redis's internal.Logging.
type RedisLogger struct{ s *zap.SugaredLogger }

// Printf logs at warn: go-redis only logs what went wrong.
func (r RedisLogger) Printf(_ context.Context, format string, v ...any) { r.s.Warnf(format, v...) }
