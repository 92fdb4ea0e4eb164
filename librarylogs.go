package main

import (
	"github.com/cloudwego/kitex/pkg/klog"

	"github.com/combo-service/combo-service/internal/logging"
	"github.com/combo-service/combo-service/internal/rpcserver"
)

// countLibrarySuppressed counts the lines Kitex's and netpoll's loggers
// leave out (logging.Klog, rpcserver's netpoll writer) in
// combo_log_lines_suppressed_total, by s, until stop is called. Those
// loggers are the process's, installed in main before run makes its
// metrics; a flood of refused connections is thinned there above all,
// and an operator reading the metric must see it.
func countLibrarySuppressed(s logging.Suppressed) (stop func()) {
	stopKitex := func() {}
	if c, ok := klog.DefaultLogger().(logging.SuppressedCounter); ok {
		stopKitex = c.CountSuppressed(s)
	}
	stopNetpoll := rpcserver.CountNetpollSuppressed(s)
	return func() {
		stopKitex()
		stopNetpoll()
	}
}
