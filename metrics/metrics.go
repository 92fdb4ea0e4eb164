// Package metrics holds the service's Prometheus collectors. One Metrics
// value is built in main on a registry and passed to the handler and the
// worker; tests build their own on a fresh registry.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

const namespace = "combo"

// Report outcomes (label values of combo_reports_total).
const (
	OutcomeOK          = "ok"
	OutcomeDuplicate   = "duplicate"
	OutcomeDegraded    = "degraded"
	OutcomeInvalid     = "invalid"
	OutcomeUnavailable = "unavailable"
	OutcomeInternal    = "internal"
	// OutcomeCanceled: the caller's ctx ended while its reports waited for
	// a pipeline, unsent (those a pipeline already carried are counted by
	// what it did with them); not a Redis failure.
	OutcomeCanceled = "canceled"
	// OutcomeDraining: refused (UNAVAILABLE) because the service is
	// stopping; the caller sends it to another replica.
	OutcomeDraining = "draining"
)

// Window flush statuses (label values of combo_windows_flushed_total).
const (
	FlushedPublished = "published"
	FlushedStale     = "stale" // dropped unpublished, older than window.stale
	FlushedGone      = "gone"  // already flushed, elsewhere or by a flush of ours answered too late
	FlushedLost      = "lost"  // data evicted, deleted or overwritten before it was published
)

// The worker's Redis operations (label op of combo_redis_errors_total).
const (
	OpPrepare        = "prepare"
	OpRead           = "read"
	OpDrop           = "drop"
	OpRetire         = "retire"
	OpClaim          = "claim"
	OpFlush          = "flush"
	OpFlushScript    = "flush_script"
	OpFinalRead      = "final_read"
	OpTime           = "time"
	OpStreamStats    = "stream_stats"
	OpPruneConsumers = "prune_consumers"
)

// The background loops (label loop of combo_loop_panics_total): the
// worker's, the one that reads which Redis Cluster node serves each
// shard, the eviction and append-only watches, the Sentinel watch, the
// settings watch, the RPC server's watch of unread bytes, the report
// path's shared pipelines, and the RPC handler's methods.
const (
	LoopRead         = "read"
	LoopClaim        = "claim"
	LoopFlush        = "flush"
	LoopHousekeeping = "housekeeping"
	LoopShardNodes   = "shard_nodes"
	// LoopEvictionWatch is the loop reading Redis's maxmemory-policy.
	LoopEvictionWatch = "eviction_watch"
	// LoopAppendOnlyWatch is the loop reading whether Redis keeps an
	// append-only file.
	LoopAppendOnlyWatch = "appendonly_watch"
	// LoopSentinelWatch is the loop acting on the Sentinels' failover
	// announcements.
	LoopSentinelWatch = "sentinel_watch"
	// LoopSettingsWatch is the loop comparing this replica's settings
	// with the other replicas'.
	LoopSettingsWatch = "settings_watch"
	// LoopUnreadWatch is the RPC server's watch of every connection's
	// unread bytes (internal/rpcserver).
	LoopUnreadWatch = "unread_watch"
	// LoopReportPipeline is the report path's shared pipelines, run by a
	// caller or by the goroutine that carries on for queued calls.
	LoopReportPipeline = "report_pipeline"
	// LoopRPCHandler is the RPC handler's methods (package handler):
	// their call fails INTERNAL.
	LoopRPCHandler = "rpc_handler"
)

// Every label value above is exported at 0 from the start. A labelled
// series that first appears at its first increment has no earlier sample,
// so increase() and rate() over it see nothing: the first burst of stale
// drops (or of UNAVAILABLE answers) would never fire its alert.
var (
	reportOutcomes  = []string{OutcomeOK, OutcomeDuplicate, OutcomeDegraded, OutcomeInvalid, OutcomeUnavailable, OutcomeInternal, OutcomeCanceled, OutcomeDraining}
	flushedStatuses = []string{FlushedPublished, FlushedStale, FlushedGone, FlushedLost}
	redisOps        = []string{OpPrepare, OpRead, OpDrop, OpRetire, OpClaim, OpFlush, OpFlushScript, OpFinalRead, OpTime, OpStreamStats, OpPruneConsumers}
	loops           = []string{LoopRead, LoopClaim, LoopFlush, LoopHousekeeping, LoopShardNodes, LoopEvictionWatch, LoopAppendOnlyWatch, LoopSentinelWatch, LoopSettingsWatch, LoopUnreadWatch, LoopReportPipeline, LoopRPCHandler}
)

// Metrics are the service's collectors.
type Metrics struct {
	Reports        *prometheus.CounterVec // by outcome
	WindowsOpened  prometheus.Counter
	WindowsFlushed *prometheus.CounterVec // by status: published, stale, gone, lost
	PushLag        prometheus.Histogram   // publish time minus due time
	// WindowsUnheard counts published windows whose PUBLISH reached no
	// subscriber (repo.FlushResult.Heard 0; never on a Redis Cluster).
	WindowsUnheard prometheus.Counter
	ReportAge      prometheus.Histogram // arrival time minus created_at
	// MergeRowsSkipped counts MergeLatest rows left out because a report
	// of them would be refused (the push path never counted them).
	MergeRowsSkipped prometheus.Counter
	Reclaimed        prometheus.Counter
	ClaimDeleted     prometheus.Counter
	// GroupsRecreated counts consumer groups found missing and created
	// again: Redis lost a stream with its waiting windows.
	GroupsRecreated prometheus.Counter
	BadEntries      prometheus.Counter
	// FlushesLate counts flush answers read that say Redis ran the flush
	// past its deadline (repo.Late), having changed nothing: the window
	// is sent again.
	FlushesLate   prometheus.Counter
	RedisErrors   *prometheus.CounterVec // by op
	LoopPanics    *prometheus.CounterVec // by loop
	HeldWindows   prometheus.Gauge
	StreamLength  *prometheus.GaugeVec // by shard, sampled
	StreamPending *prometheus.GaugeVec // by shard, sampled
	StreamOverdue *prometheus.GaugeVec // by shard, sampled
	// StreamIDsAhead is how far the newest window's id is ahead of
	// Redis's clock: windows come due that late (repo.StreamStats).
	StreamIDsAhead *prometheus.GaugeVec // by shard, sampled
	// StreamMaxLength is redis.stream_maxlen, so an alert can compare
	// StreamLength with the bound past which this replica opens no window.
	StreamMaxLength prometheus.Gauge
	ConsumersGone   prometheus.Counter
	// RedisNodesEvicting is the number of Redis nodes last read with a
	// maxmemory-policy other than noeviction (main's newEvictionWatch).
	RedisNodesEvicting prometheus.Gauge
	// RedisNodesNotAppendOnly is the number of Redis nodes last read
	// keeping no append-only file (main's newAppendOnlyWatch).
	RedisNodesNotAppendOnly prometheus.Gauge
	// ReplicasSettingsDiffer is the number of other replicas, among those
	// that keep their settings in Redis, last read with other redis.shards
	// or window.* settings than this one's (main's settingsWatch).
	ReplicasSettingsDiffer prometheus.Gauge
	// RedisLoginsRefused is, by "node" and "sentinel", how many refused
	// this service's login at the eviction watch's last reading.
	RedisLoginsRefused *prometheus.GaugeVec
	// ConsumerShared is 1 while another process is found claiming this
	// replica's worker.consumer (main's consumerClaim).
	ConsumerShared prometheus.Gauge
	// BuildInfo is 1, labelled with the running build's version and
	// revision (the start log's), so a scrape tells which code each
	// replica runs: go_build_info has no revision in the container image.
	BuildInfo *prometheus.GaugeVec // by version, revision
	// The report path's shared pipelines (repo.Settings.ObservePipeline).
	PipelineReports prometheus.Histogram
	PipelineSeconds prometheus.Histogram
	// LogLinesSuppressed counts the log lines the sampled loggers left
	// out (LogSuppressed), by logger.
	LogLinesSuppressed *prometheus.CounterVec
}

// New registers the collectors on reg.
func New(reg prometheus.Registerer) *Metrics {
	f := promauto.With(reg)
	m := &Metrics{
		Reports: f.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "reports_total",
			Help: "Contributions reported, by outcome: ok, duplicate, degraded, invalid, unavailable, internal, canceled, draining."}, []string{"outcome"}),
		WindowsOpened: f.NewCounter(prometheus.CounterOpts{Namespace: namespace, Name: "windows_opened_total",
			Help: "Windows opened (first report of a combo key's window), also by a batch answered with an error because its degraded reports could not be published or Redis did not answer for some of its reports."}),
		WindowsFlushed: f.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "windows_flushed_total",
			Help: "Windows retired by the worker, by status: published, stale (dropped unpublished), gone (already flushed, elsewhere or by a flush of this replica answered too late), lost (data evicted, deleted or overwritten before publish)."}, []string{"status"}),
		WindowsUnheard: f.NewCounter(prometheus.CounterOpts{Namespace: namespace, Name: "windows_unheard_total",
			Help: "Windows published (windows_flushed_total{status=\"published\"}) whose PUBLISH reached no subscriber: no gateway was subscribed to the channel, or a pattern matching it, on the Redis that published it. " +
				"Not counted on a Redis Cluster, where a node's PUBLISH counts only its own subscribers."}),
		PushLag: f.NewHistogram(prometheus.HistogramOpts{Namespace: namespace, Name: "push_lag_seconds",
			Help:    "Publish time minus the window's due time (W + grace after its first report), by Redis's clock.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}}),
		ReportAge: f.NewHistogram(prometheus.HistogramOpts{Namespace: namespace, Name: "report_age_seconds",
			Help: "Arrival time of a report counted (not refused, not a duplicate; this replica's clock) minus its created_at (the caller's clock; " +
				"0 when ahead). One that arrives more than window.size + window.grace after its window's first report " +
				"misses that window: it is pushed as an item of its own, where MergeLatest merges it.",
			Buckets: []float64{.01, .05, .1, .25, .5, 1, 2, 3, 5, 10, 30, 60, 300}}),
		MergeRowsSkipped: f.NewCounter(prometheus.CounterOpts{Namespace: namespace, Name: "merge_rows_skipped_total",
			Help: "MergeLatest rows left out of the merge because their report would be refused (INVALID_ARGUMENT), so the push path never counted them either."}),
		Reclaimed: f.NewCounter(prometheus.CounterOpts{Namespace: namespace, Name: "reclaimed_entries_total",
			Help: "Stream entries taken over once idle past claim_idle (XAUTOCLAIM): another consumer's, or this replica's own that it had let go (a window whose flush panicked)."}),
		ClaimDeleted: f.NewCounter(prometheus.CounterOpts{Namespace: namespace, Name: "claim_deleted_entries_total",
			Help: "Pending entries found deleted from the stream, by XAUTOCLAIM or by a read of a consumer's own pending entries: their windows cannot be published."}),
		GroupsRecreated: f.NewCounter(prometheus.CounterOpts{Namespace: namespace, Name: "stream_groups_recreated_total",
			Help: "Consumer groups found missing (NOGROUP, or a blocked read told its stream was deleted) and created again: Redis lost the stream and the windows waiting in it (FLUSHALL, restart without persistence, eviction), whose flushes then count as gone."}),
		BadEntries: f.NewCounter(prometheus.CounterOpts{Namespace: namespace, Name: "bad_entries_total",
			Help: "Times a stream entry could not be parsed or its processing panicked; one entry can count again (a window whose flush keeps panicking, each time it is claimed until stale; unparsable entries a failed drop leaves to be read again)."}),
		FlushesLate: f.NewCounter(prometheus.CounterOpts{Namespace: namespace, Name: "flushes_late_total",
			Help: "Window flush answers that say Redis ran the flush past its deadline (when its sender stops waiting for the answer), so it changed nothing and the window was sent again: " +
				"the worker's estimate of the node's clock was behind (a jump of that clock, a failover), or the node ran it at the very end of that wait. " +
				"A flush run after its sender stopped waiting is not counted here, since its answer is never read: that send counts in combo_redis_errors_total{op=\"flush\"}."}),
		RedisErrors: f.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "redis_errors_total",
			Help: "Failed Redis operations, by operation."}, []string{"op"}),
		LoopPanics: f.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "loop_panics_total",
			Help: "Panics recovered in background loops and RPC handlers, by loop."}, []string{"loop"}),
		HeldWindows: f.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Name: "held_windows",
			Help: "Windows this replica has read and holds until they are due."}),
		StreamLength: f.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: "stream_length",
			Help: "Entries in the shard's stream (open windows), sampled."}, []string{"shard"}),
		StreamPending: f.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: "stream_pending",
			Help: "Entries read by some consumer and not yet flushed, sampled."}, []string{"shard"}),
		StreamOverdue: f.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: "stream_oldest_overdue_seconds",
			Help: "How long past its due time (W + grace after its first report) the oldest window still in the shard's stream is, by Redis's clock, sampled; 0 when none is overdue. " +
				"Flushing removes a window's entry, so this grows while a shard's windows are not published (its slot stuck half-moved, flushes refused while reads work, no replica reading it), past window.stale while the fault lasts, and goes back to 0 once they are flushed (published, or dropped stale)."}, []string{"shard"}),
		StreamIDsAhead: f.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: "stream_ids_ahead_seconds",
			Help: "How far the id of the newest window in the shard's stream is ahead of Redis's clock, sampled; 0 when none is. " +
				"Redis keeps a stream's ids increasing, so after its clock steps back (an NTP step, a failover to a node whose clock is behind) new windows take ids ahead of it and are pushed up to this much late, while their push lag reads 0."}, []string{"shard"}),
		StreamMaxLength: f.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Name: "stream_max_length",
			Help: "redis.stream_maxlen: at it, no window is opened and reports are published on their own (degraded)."}),
		RedisNodesEvicting: f.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Name: "redis_nodes_evicting",
			Help: "Redis nodes last read with a maxmemory-policy other than noeviction, which may evict windows, dedupe ids and the stream (on a Cluster, masters and replicas; with Sentinel, the master and the replicas the Sentinels list, one they list as down kept as last read until SENTINEL RESET, as is a Cluster node marked failed until the Cluster forgets it); read every minute (0 with the embedded Redis)."}),
		RedisNodesNotAppendOnly: f.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Name: "redis_nodes_not_appendonly",
			Help: "Redis nodes last read keeping no append-only file (aof_enabled 0), which, restarted as the master (a replica once a failover promotes it), come back from an older snapshot or empty, losing windows acknowledged since or pushing them twice (the same nodes as combo_redis_nodes_evicting); read every minute (0 with the embedded Redis)."}),
		ReplicasSettingsDiffer: f.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Name: "replicas_settings_differ",
			Help: "Other replicas last read with redis.shards or window.* settings other than this one's, which count a combo key's reports twice or cut its windows by another rule; read every 30 s (0 with the embedded Redis)."}),
		RedisLoginsRefused: f.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: "redis_logins_refused",
			Help: "Redis nodes (by=\"node\") and Sentinels (by=\"sentinel\") that refused this service's login at the eviction watch's last reading, every minute: a node without the service's ACL user fails every report of its shards once it is the master (0 with the embedded Redis)."}, []string{"by"}),
		ConsumerShared: f.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Name: "worker_consumer_shared",
			Help: "1 while another process is found claiming this replica's worker.consumer (from this process's second claim on, every 30 s), 0 once none has for three claims: the two share one consumer's pending entries and one settings key (0 with the embedded Redis)."}),
		BuildInfo: f.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: "build_info",
			Help: "1, labelled with the running build's version and VCS revision."}, []string{"version", "revision"}),
		ConsumersGone: f.NewCounter(prometheus.CounterOpts{Namespace: namespace, Name: "consumers_removed_total",
			Help: "Dead consumers removed from the group (no pending entries, idle past worker.consumer_idle_delete, their replica's settings key gone)."}),
		PipelineReports: f.NewHistogram(prometheus.HistogramOpts{Namespace: namespace, Name: "report_pipeline_reports",
			Help:    "Reports per Redis pipeline of the report path: concurrent calls share one pipeline, so under load this grows.",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024}}),
		PipelineSeconds: f.NewHistogram(prometheus.HistogramOpts{Namespace: namespace, Name: "report_pipeline_seconds",
			Help:    "Time from sending a report pipeline to Redis to its last reply (NOSCRIPT retries included, and the publish of its degraded reports, a second round trip, when some degrade).",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1}}),
		LogLinesSuppressed: f.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "log_lines_suppressed_total",
			Help: "Log lines at info or above left out because the same message was logged at the same level less than a second before, " +
				"by logger: worker, handler, shard_nodes, sentinel_watch, settings_watch, repo (a report pipeline's panic), main (the Redis TLS dialer's and the embedded Redis's), kitex, netpoll."}, []string{"logger"}),
	}
	for _, o := range reportOutcomes {
		m.Reports.WithLabelValues(o)
	}
	for _, s := range flushedStatuses {
		m.WindowsFlushed.WithLabelValues(s)
	}
	for _, op := range redisOps {
		m.RedisErrors.WithLabelValues(op)
	}
	for _, l := range loops {
		m.LoopPanics.WithLabelValues(l)
	}
	for _, by := range []string{"node", "sentinel"} {
		m.RedisLoginsRefused.WithLabelValues(by)
	}
	return m
}

// LogSuppressed counts n log lines left out by the logger named logger; it
// is the logging.Suppressed of the service's sampled loggers. The unnamed
// logger's lines count as logger "main".
func (m *Metrics) LogSuppressed(logger string, n int) {
	if logger == "" {
		logger = "main"
	}
	m.LogLinesSuppressed.WithLabelValues(logger).Add(float64(n))
}

// RegisterClientCertificateExpiry exports when the client certificate new
// connections to Redis present (redis.tls_cert_file) expires, as notAfter
// reads it at each scrape. Registered only when one is configured: a
// series at 0 would read as long expired.
func RegisterClientCertificateExpiry(reg prometheus.Registerer, notAfter func() float64) {
	promauto.With(reg).NewGaugeFunc(prometheus.GaugeOpts{Namespace: namespace,
		Name: "redis_tls_client_certificate_expiry_timestamp_seconds",
		Help: "When the client certificate new connections to Redis present (redis.tls_cert_file, as last read whole) expires, in unix seconds. " +
			"The file is read again at each new connection and each scrape, so a certificate renewed in place shows here at once."},
		notAfter)
}

// RegisterTLSFilesRead exports whether the redis.tls_* files read whole
// when last read, as filesRead reads them again at each scrape; with
// redis.tls only. A rotation caught half written reads 0 for a moment; a
// 0 that stays means new connections use old files until those expire or
// Redis stops trusting them.
func RegisterTLSFilesRead(reg prometheus.Registerer, filesRead func() float64) {
	promauto.With(reg).NewGaugeFunc(prometheus.GaugeOpts{Namespace: namespace,
		Name: "redis_tls_files_read",
		Help: "1 if the redis.tls_* files read whole when read again at this scrape; 0 if not (the log says why), and new connections to Redis use the files last read whole."},
		filesRead)
}
