package logging

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/cloudwego/kitex/pkg/klog"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Klog adapts a zap logger to Kitex's klog.FullLogger; install it with
// klog.SetLogger(logging.Klog(l)).
//
// Kitex logs an error line for every refused connection and request, each
// naming the peer, so zap's sampler (keyed by the whole message) would
// thin none of them: a flood the service refuses would become a flood of
// log lines. Lines at info and above are sampled here by Kitex's format
// string instead: the first, then at most one a second. The next line of a
// format written after some were suppressed says how many
// (suppressed_since_last) and when the first of them came
// (suppressed_since); all came within a second of that, as a line is
// suppressed only within a second of the last one written. That next line
// may come hours later, or never (no timer writes the count on its own):
// the time says when the suppressed lines were.
func Klog(l *zap.Logger) klog.FullLogger {
	return &klogger{s: l.Named("kitex").WithOptions(zap.AddCallerSkip(4)).Sugar(), sample: newKeySampler(),
		count: &libraryCount{name: "kitex"}}
}

type klogger struct {
	s      *zap.SugaredLogger
	sample *keySampler   // by format (Kitex's formats are a fixed set)
	count  *libraryCount // the lines left out
}

// CountSuppressed counts the lines left out from now on by s (logger
// "kitex"), until stop is called.
func (k *klogger) CountSuppressed(s Suppressed) (stop func()) { return k.count.set(s) }

var _ klog.FullLogger = (*klogger)(nil)

func (k *klogger) write(lvl zapcore.Level, key, msg string) {
	if !k.s.Level().Enabled(lvl) {
		return // below log.level: not counted as left out either
	}
	ok, suppressed, since := true, 0, time.Time{}
	if lvl >= zapcore.InfoLevel {
		ok, suppressed, since = k.sample.pass(key)
	}
	switch {
	case !ok:
		k.count.add()
	case suppressed > 0:
		k.s.Logw(lvl, msg, "suppressed_since_last", suppressed, "suppressed_since", since)
	default:
		k.s.Log(lvl, msg)
	}
}

func (k *klogger) log(lvl zapcore.Level, v ...any) {
	msg := fmt.Sprint(v...)
	k.write(lvl, msg, msg)
}

func (k *klogger) logf(lvl zapcore.Level, format string, v ...any) {
	k.write(lvl, format, fmt.Sprintf(format, v...))
}

func (k *klogger) Trace(v ...any)  { k.log(zapcore.DebugLevel, v...) }
func (k *klogger) Debug(v ...any)  { k.log(zapcore.DebugLevel, v...) }
func (k *klogger) Info(v ...any)   { k.log(zapcore.InfoLevel, v...) }
func (k *klogger) Notice(v ...any) { k.log(zapcore.InfoLevel, v...) }
func (k *klogger) Warn(v ...any)   { k.log(zapcore.WarnLevel, v...) }
func (k *klogger) Error(v ...any)  { k.log(zapcore.ErrorLevel, v...) }

// Fatal is logged at error level: a library must not exit our process.
func (k *klogger) Fatal(v ...any) { k.log(zapcore.ErrorLevel, v...) }

func (k *klogger) Tracef(f string, v ...any)  { k.logf(zapcore.DebugLevel, f, v...) }
func (k *klogger) Debugf(f string, v ...any)  { k.logf(zapcore.DebugLevel, f, v...) }
func (k *klogger) Infof(f string, v ...any)   { k.logf(zapcore.InfoLevel, f, v...) }
func (k *klogger) Noticef(f string, v ...any) { k.logf(zapcore.InfoLevel, f, v...) }
func (k *klogger) Warnf(f string, v ...any)   { k.logf(zapcore.WarnLevel, f, v...) }
func (k *klogger) Errorf(f string, v ...any)  { k.logf(zapcore.ErrorLevel, f, v...) }
func (k *klogger) Fatalf(f string, v ...any)  { k.logf(zapcore.ErrorLevel, f, v...) }

// The Ctx methods call logf themselves: every path is as deep, so one
// caller skip points at Kitex's code for each.
func (k *klogger) CtxTracef(_ context.Context, f string, v ...any) {
	k.logf(zapcore.DebugLevel, f, v...)
}
func (k *klogger) CtxDebugf(_ context.Context, f string, v ...any) {
	k.logf(zapcore.DebugLevel, f, v...)
}
func (k *klogger) CtxInfof(_ context.Context, f string, v ...any) { k.logf(zapcore.InfoLevel, f, v...) }
func (k *klogger) CtxNoticef(_ context.Context, f string, v ...any) {
	k.logf(zapcore.InfoLevel, f, v...)
}
func (k *klogger) CtxWarnf(_ context.Context, f string, v ...any) { k.logf(zapcore.WarnLevel, f, v...) }
func (k *klogger) CtxErrorf(_ context.Context, f string, v ...any) {
	k.logf(zapcore.ErrorLevel, f, v...)
}
func (k *klogger) CtxFatalf(_ context.Context, f string, v ...any) {
	k.logf(zapcore.ErrorLevel, f, v...)
}

// SetLevel is ignored: the zap logger's level, from log.level, decides.
func (k *klogger) SetLevel(klog.Level) {}

// SetOutput is ignored: output is zap's.
func (k *klogger) SetOutput(io.Writer) {}
