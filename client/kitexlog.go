package client

import (
	"github.com/cloudwego/kitex/pkg/klog"
	"go.uber.org/zap"

	"github.com/combo-service/combo-service/internal/logging"
)

// KitexLogger adapts l to Kitex's process-wide klog logger, thinned as
// combo-service thins its own: install it with klog.SetLogger at start-up.
//
// Kitex's client writes a warning for every attempt its load balancer
// retries after a connection error ("KITEX: auto retry retryable error",
// up to 6 per call, all to the one address when hostPorts holds one), to
// its default logger on stderr: while a replica is down or restarting, a
// caller reporting 500 times a second wrote about 3,000 such lines a
// second. With this logger, lines at info and above are written at most
// once a second per Kitex format, and the next one written says how many
// were left out (suppressed_since_last) and since when (suppressed_since).
// Lines are logged under the name "kitex".
func KitexLogger(l *zap.Logger) klog.FullLogger { return logging.Klog(l) }
