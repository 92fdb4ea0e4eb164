package logging

import (
	"context"
	"fmt"
	"io"

	"github.com/cloudwego/kitex/pkg/klog"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Klog adapts a zap logger to Kitex's klog.FullLogger; install it with
// klog.SetLogger(logging.Klog(l)).
func Klog(l *zap.Logger) klog.FullLogger {
	return &klogger{s: l.Named("kitex").WithOptions(zap.AddCallerSkip(3)).Sugar()}
}

type klogger struct{ s *zap.SugaredLogger }

var _ klog.FullLogger = (*klogger)(nil)

func (k *klogger) log(lvl zapcore.Level, v ...any) { k.s.Log(lvl, fmt.Sprint(v...)) }
func (k *klogger) logf(lvl zapcore.Level, format string, v ...any) {
	k.s.Log(lvl, fmt.Sprintf(format, v...))
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

func (k *klogger) CtxTracef(_ context.Context, f string, v ...any)  { k.Tracef(f, v...) }
func (k *klogger) CtxDebugf(_ context.Context, f string, v ...any)  { k.Debugf(f, v...) }
func (k *klogger) CtxInfof(_ context.Context, f string, v ...any)   { k.Infof(f, v...) }
func (k *klogger) CtxNoticef(_ context.Context, f string, v ...any) { k.Noticef(f, v...) }
func (k *klogger) CtxWarnf(_ context.Context, f string, v ...any)   { k.Warnf(f, v...) }
func (k *klogger) CtxErrorf(_ context.Context, f string, v ...any)  { k.Errorf(f, v...) }
func (k *klogger) CtxFatalf(_ context.Context, f string, v ...any)  { k.Fatalf(f, v...) }

// SetLevel is ignored: the zap logger's level, from log.level, decides.
func (k *klogger) SetLevel(klog.Level) {}

// SetOutput is ignored: output is zap's.
func (k *klogger) SetOutput(io.Writer) {}
