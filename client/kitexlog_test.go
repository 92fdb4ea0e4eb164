package client

import (
	"context"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// A burst of Kitex's per-retry warnings is thinned to its first line.
func TestKitexLoggerThinsRetryWarnings(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	l := KitexLogger(zap.New(core))
	for i := range 1000 {
		l.CtxWarnf(context.Background(), "KITEX: auto retry retryable error, to_service=%s, retry=%d error=%s",
			ServiceName, i%6+1, "dial tcp 127.0.0.1:1: connection refused")
	}
	if n := logs.Len(); n != 1 {
		t.Fatalf("%d lines written for a burst of 1000 retry warnings, want 1", n)
	}
	// KitexLogger's doc: lines are logged under the name "kitex".
	if name := logs.All()[0].LoggerName; name != "kitex" {
		t.Fatalf("logged under %q, want \"kitex\"", name)
	}
}
