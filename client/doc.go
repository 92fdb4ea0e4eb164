// Package client is the caller's side of combo-service: a Kitex client
// constructor (NewClient; TTHeader framing, so a replica that stops can
// tell the pool to drop its connections), a ComboError helper
// (IsComboError), and a
// Reporter that makes reporting contributions fire-and-forget without ever
// losing one silently.
//
// # Reporter
//
// Report validates a contribution (with the service's own rules, package
// validate) and puts a copy in a bounded in-memory queue; it never waits for
// the network. In the background, a batch goes out with ReportContributions
// as soon as BatchSize sendable contributions (see below) are queued or the
// oldest of them has waited Linger, at most Concurrency batches at a time. A failed batch is retried
// up to MaxRetries times with jittered exponential backoff, by default for
// about 11-32 s (11-21 s when each attempt fails at once, UNAVAILABLE or
// refused, up to 32 s when each times out), so a replica restart or a
// Redis failover within that loses nothing. A Sentinel failover takes
// down-after-milliseconds (30 s by default) and a second or two more:
// lower it (README's test uses 500 ms), or raise MaxRetries.
// combo-service deduplicates by contribution id within its window.dedupe,
// so a retry does not count twice; the one exception is a report the
// service had to publish on its own while Redis refused writes (degraded,
// see README), which a retry pushes again. A batch refused with
// INVALID_ARGUMENT is not retried, since it can never succeed as sent: if
// the refusal names one item (e.g. "contributions[3].quantity: ..."), only
// that item is dropped and the rest is sent again at once; otherwise the
// whole batch is dropped. Each attempt is bounded by RPCTimeout, passed to Kitex as a
// call option, so it overrides the client's own RPC timeout.
//
// Reports of one combo key (activity_id, user_id, item_type) reach the
// service in the order Report took them, which is what makes the live feed
// agree with MergeLatest over the DB rows when a key's rows are reported in
// created_at order, each before its window is pushed (W + grace after the
// window's first report): a contribution whose key is in a batch still in flight
// (or waiting for a retry) waits, queued in order, until that batch is sent
// or dropped, while other keys go on concurrently. The price is that a
// retried batch holds back the later reports of its keys for as long as its
// retries take. Two cases fall outside the order, both after a drop: an
// attempt abandoned at RPCTimeout may still be counted by the service
// after the key's next reports went out (the Reporter cannot know when a
// request it gave up on lands), and a contribution re-reported from OnDrop
// goes after the reports of its key taken since. The order is one
// Reporter's: reports of one key from several processes reach the service
// as they arrive.
//
// Every contribution ends one of these ways, and each is visible:
//
//   - Report returns an error (ErrClosed, a *validate.Error naming the
//     field, or ErrQueueFull): nothing was taken, the caller still owns
//     the contribution;
//   - the service acknowledges it: Stats().Sent;
//   - the Reporter gives up: Stats().Dropped, and the batch is handed to
//     ReporterOptions.OnDrop with the reason and logged to
//     ReporterOptions.Logger, whichever of them are set; with neither set,
//     it is logged at error level to stderr. The error tells why:
//     errors.Is(err, ErrRetriesExhausted) (it wraps the last attempt's
//     error too), IsComboError with CodeInvalidArgument (refused, not
//     retried), or errors.Is(err, ErrClosed) (Close's ctx ended first; it
//     wraps ctx's error too).
//
// The queue is memory only: if the process dies without Close, what it held
// is lost. The caller's DB row is the durable copy, and the poll path
// (MergeLatest over the DB rows) shows every row whatever the live feed
// missed. A contribution Report refused was never sent, so reporting it
// again cannot count it twice. One handed to OnDrop may already have been
// counted, unless it was refused with INVALID_ARGUMENT: any of its attempts
// may have been run by Redis after the service stopped waiting for it (an
// attempt answered UNAVAILABLE too: a Redis that stalled ran it on
// resuming), or it was in flight when Close's ctx expired. The service
// recognises its id for window.dedupe (60 s by default) from when it
// counted it, which can be as early as the batch's first attempt, 11-32 s
// before the drop: a re-report sent from OnDrop at once is recognised if
// it reaches the service within the rest of that (about 28 s at worst
// with the defaults; a re-report that itself retries through the outage
// may not); a re-report job that runs later may count it twice in the
// live feed. Re-report a drop once, not every drop of a re-report: that
// loops for as long as the outage lasts.
// Either way it reaches the service after the later reports of its key,
// so its window may differ from the poll path's.
//
// # Replicas behind one name
//
// NewClient looks a host name up at each new connection and dials one of
// its addresses at random, each tried with a share of the connect timeout:
// a name with one address per replica (a headless Kubernetes service,
// docker compose replicas) has its connections spread over them, and a
// replica that drops packets no longer takes all of every dial's timeout.
// Calls go over pooled connections, and a connection stays with the replica
// it was dialed to: a replica added to the name later takes calls only as
// connections are dialed again, that is when the load grows past the
// connections open, when idle ones are closed (after a minute unused), or
// when a stopping replica makes its callers drop theirs (a rolling deploy).
// Under a steady load it may take none until then: Kitex's pool (v0.16.3)
// has no bound on a connection's age that would force it. A ClusterIP or
// other address balanced per connection (kube-proxy) is no different. For
// calls spread over the replicas at once, list each replica's own
// host:port: Kitex balances each call among the entries of hostPorts (a
// list fixed when the client is built).
//
// # Usage in activityService
//
// Build one Reporter at start-up, report each purchase right after its DB
// write commits, and Close it on shutdown after the RPC server has stopped
// taking requests:
//
//	// Kitex logs a warning per connection retry, process-wide: thin them.
//	klog.SetLogger(client.KitexLogger(logger))
//	// One name for the replicas: see "Replicas behind one name" above.
//	cli, err := client.NewClient([]string{"combo-service:8888"})
//	if err != nil {
//		return err
//	}
//	reporter, err := client.NewReporter(cli, client.ReporterOptions{
//		Registerer: prometheus.DefaultRegisterer,
//		OnDrop: func(batch []*combo.Contribution, err error) {
//			// Given up on. The service may have counted these already
//			// (unless refused as invalid), and it recognises a re-report
//			// only within window.dedupe: log them rather than queue them
//			// for a later re-report job.
//			for _, c := range batch {
//				logger.Error("combo report dropped", zap.Int64("id", c.Id), zap.Error(err))
//			}
//		},
//	})
//	if err != nil {
//		return err
//	}
//
//	// In the purchase handler, after the activity_contributions row is written:
//	if err := reporter.Report(ctx, contribution); err != nil {
//		// Not taken (invalid, queue full, or shutting down): the purchase
//		// itself succeeded, so log it and let a re-report job pick it up.
//		logger.Warn("combo report not queued", zap.Int64("id", contribution.Id), zap.Error(err))
//	}
//
//	// On shutdown. Close sends what is queued and waits for batches being
//	// retried: with the service up it takes milliseconds (5,000 queued:
//	// 70 ms); just after an outage, a batch may still wait out a backoff
//	// (up to MaxBackoff, 5 s) and its attempt (RPCTimeout, 1 s); during
//	// one, each wave of Concurrency batches may retry for about 32 s (the
//	// defaults), so Close can take far longer than that with much queued.
//	// Give it what shutdown can afford, and the container a grace period
//	// above that; what is still held when ctx ends is dropped (OnDrop).
//	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
//	defer cancel()
//	before := reporter.Stats().Dropped
//	closeErr := reporter.Close(ctx) // nil even if batches were dropped while it flushed
//	if dropped := reporter.Stats().Dropped - before; closeErr != nil || dropped > 0 {
//		logger.Error("combo reporter: not everything was flushed", zap.Uint64("dropped", dropped), zap.Error(closeErr))
//	}
package client
