package main

import (
	"github.com/cloudwego/kitex/pkg/klog"

	"github.com/combo-service/combo-service/internal/logging"
	"github.com/combo-service/combo-service/internal/rpcserver"
)

// countLibrarySuppressed counts the lines Kitex's and netpoll's loggers
// leave out (logging.Klog, rpcserver's netpoll writer) in
// combo_log_lines_suppressed_total, by s, nil for none. Those loggers are
// the process's, installed in main before run makes its metrics; a flood
// of refused connections is thinned there above all, and an operator
// reading the metric must see it.
func countLibrarySuppressed(s logging.Suppressed) {
	if c, ok := klog.DefaultLogger().(logging.SuppressedCounter); ok {
		c.CountSuppressed(s)
	}
	rpcserver.CountNetpollSuppressed(s)
}
