package logging

import (
	"bytes"
	"os"
	"strings"
	"sync/atomic"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// NetpollWriter is an io.Writer for netpoll's own logger
// (netpoll.Config.LoggerOutput), which netpoll takes once, in an init
// function, before main has built a logger. Until SetLogger, lines go to
// stderr as netpoll would write them. After, each is a line of that
// logger, named "netpoll", at warn (netpoll logs only what went wrong:
// accepts failing for want of file descriptors, a close failing...),
// without the date log.LstdFlags puts before it.
//
// netpoll's lines name peers and errors, so zap's sampler (keyed by the
// whole message) would thin none of them: after an accept fails for want
// of file descriptors, netpoll logs one line per connection it takes.
// They are sampled like Klog's instead, by their text up to the first
// ": " or "=" less digits (netpollKey): the first, then at most one a
// second, the next one written saying how many were suppressed
// (suppressed_since_last) and when the first of them came
// (suppressed_since).
type NetpollWriter struct {
	l      atomic.Pointer[zap.Logger]
	sample *keySampler
	count  libraryCount // the lines left out
}

// NewNetpollWriter returns a writer that writes to stderr until SetLogger.
func NewNetpollWriter() *NetpollWriter {
	return &NetpollWriter{sample: newKeySampler(), count: libraryCount{name: "netpoll"}}
}

// CountSuppressed counts the lines left out from now on by s (logger
// "netpoll"), until stop is called.
func (w *NetpollWriter) CountSuppressed(s Suppressed) (stop func()) { return w.count.set(s) }

// SetLogger sends the lines written from now on to l; nil, to stderr again.
func (w *NetpollWriter) SetLogger(l *zap.Logger) {
	if l != nil {
		// The caller is netpoll's code that logged: it called a
		// log.Logger method (Printf, Println...), which calls
		// log.(*Logger).output, which calls Write, which logs.
		l = l.Named("netpoll").WithOptions(zap.AddCallerSkip(3))
	}
	w.l.Store(l)
}

// Write takes one line of log.Logger's, which calls it once per line.
func (w *NetpollWriter) Write(p []byte) (int, error) {
	l := w.l.Load()
	if l == nil {
		return os.Stderr.Write(p)
	}
	msg := string(bytes.TrimRight(trimLogDate(p), "\n"))
	ce := l.Check(zapcore.WarnLevel, msg)
	if ce == nil { // below log.level: not counted as suppressed either
		return len(p), nil
	}
	ok, suppressed, since := w.sample.pass(netpollKey(msg))
	switch {
	case !ok:
		w.count.add()
	case suppressed > 0:
		ce.Write(zap.Int("suppressed_since_last", suppressed), zap.Time("suppressed_since", since))
	default:
		ce.Write()
	}
	return len(p), nil
}

// trimLogDate drops the "2006/01/02 15:04:05 " log.LstdFlags puts before
// each line: zap dates its own.
func trimLogDate(p []byte) []byte {
	const layout = "0000/00/00 00:00:00 "
	if len(p) < len(layout) {
		return p
	}
	for i := range len(layout) {
		switch c := p[i]; layout[i] {
		case '0':
			if c < '0' || c > '9' {
				return p
			}
		default:
			if c != layout[i] {
				return p
			}
		}
	}
	return p[len(layout):]
}

// netpollKey is what kind of line a netpoll line is: its text up to the
// first ": " or "=" past netpoll's "NETPOLL: ", less digits. What follows
// those names the peer, the error or values ("re-accept conn success:
// 127.0.0.1:39384", "re-accept conn failed, err=[...] and next
// retrytime=500ms"); digits before them are file descriptors
// ("netFD[12] close error: ...").
func netpollKey(msg string) string {
	key := strings.TrimPrefix(msg, "NETPOLL: ")
	if i := strings.Index(key, ": "); i >= 0 {
		key = key[:i]
	}
	if i := strings.IndexByte(key, '='); i >= 0 {
		key = key[:i]
	}
	return strings.Map(func(r rune) rune {
		if r >= '0' && r <= '9' {
			return -1
		}
		return r
	}, key)
}
