package server

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
)

// Metrics are the server's Prometheus collectors. Blob operations are counted
// by the store decorator in package blob/instrumented.
//
// Merges are reported through the shard writers' OnMerge hook.
type Metrics struct {
	rpcDuration       *prometheus.HistogramVec
	recordsAppended   prometheus.Counter
	bytesAppended     prometheus.Counter
	alreadyPresent    prometheus.Counter
	generationsPerRPC prometheus.Histogram
	residentWriters   prometheus.Gauge
	writerOpens       prometheus.Counter
	openBackoffs      prometheus.Counter
	openDuration      prometheus.Histogram
	evictions         prometheus.Counter
	fences            prometheus.Counter
	logFences         prometheus.Counter
	checkpoints       prometheus.Counter
	selfHeals         prometheus.Counter
	panics            prometheus.Counter
	decodeFailures    *prometheus.CounterVec
	scannedRecords    prometheus.Counter
	subscribedRecords prometheus.Counter
	merges            prometheus.Counter
	mergeDuration     prometheus.Histogram
	mergeSources      prometheus.Counter
	errorReasons      *prometheus.CounterVec
	shutdownTimeouts  *prometheus.CounterVec
	consumers         *consumerMetrics

	collectors []prometheus.Collector
}

// NewMetrics creates the server's collectors. Register them with Register,
// once, when the server is built.
func NewMetrics() *Metrics {
	m := &Metrics{
		rpcDuration: newHistogramVec("rolloutd_rpc_duration_seconds",
			"Latency of RPCs by method and gRPC status code: unary ones (Append, Get, health Check) and the whole life of a Scan stream.",
			prometheus.ExponentialBuckets(0.0005, 2, 18), // 0.5 ms .. 65 s
			"method", "code"),
		recordsAppended: newCounter("rolloutd_records_appended_total",
			"Records acknowledged by Append (already-present ones included)."),
		bytesAppended: newCounter("rolloutd_bytes_appended_total",
			"Encoded bytes of the records acknowledged by Append."),
		alreadyPresent: newCounter("rolloutd_records_already_present_total",
			"Appended records whose id was already committed (retries of landed appends)."),
		generationsPerRPC: newHistogram("rolloutd_append_generations",
			"Distinct generations the records of one acknowledged Append were committed in.",
			[]float64{1, 2, 3, 4, 8, 16}),
		residentWriters: newGauge("rolloutd_writers_resident",
			"Shard writers this instance holds (resident in the LRU, or evicted but still pinned)."),
		writerOpens: newCounter("rolloutd_writer_opens_total",
			"Shard writer opens (epoch claims), successful or not."),
		openBackoffs: newCounter("rolloutd_writer_open_backoffs_total",
			"Failed shard writer opens after which the shard's next open backs off (doubling up to 2 s while its opens keep failing, as in a storage partition)."),
		openDuration: newHistogram("rolloutd_writer_open_duration_seconds",
			"Latency of opening a shard writer (claiming its epoch).",
			prometheus.ExponentialBuckets(0.0005, 2, 16)),
		evictions: newCounter("rolloutd_writer_evictions_total",
			"Shard writers evicted from the LRU (aborted at once, or at their last unpin)."),
		fences: newCounter("rolloutd_writer_fences_total",
			"Shard writers found fenced by another writer's epoch and replaced (once per shard and epoch)."),
		logFences: newCounter("rolloutd_log_fences_total",
			"Fences written into shard logs (protocol v2): one per takeover of a shard, by another process or after a writer of this one left a create in doubt; a reopen after a clean end writes none."),
		checkpoints: newCounter("rolloutd_checkpoints_total",
			"Manifest checkpoints written by this instance's shard writers (protocol v2), the claims' confirming ones excluded."),
		selfHeals: newCounter("rolloutd_append_self_heals_total",
			"Appends that failed on a fenced (or closed) writer and then succeeded on its replacement."),
		panics: newCounter("rolloutd_rpc_panics_total",
			"RPC handlers that panicked (recovered, answered Internal)."),
		decodeFailures: newCounterVec("rolloutd_rpc_decode_failures_total",
			"Requests whose message did not decode (not protobuf, or not the method's request), by method; they are answered Internal by gRPC and reach no handler or access log.",
			"method"),
		subscribedRecords: newCounter("rolloutd_records_subscribed_total",
			"Records delivered by Subscribe streams (after filtering)."),
		scannedRecords: newCounter("rolloutd_records_scanned_total",
			"Records delivered by Scan streams (after filtering)."),
		merges: newCounter("rolloutd_merges_total",
			"Merges committed by this instance's shard writers, including those a commit folded into its own generation."),
		mergeDuration: newHistogram("rolloutd_merge_duration_seconds",
			"Time from starting a merge to committing it (folds, done within a commit, are not observed).",
			prometheus.ExponentialBuckets(0.001, 2, 16)),
		mergeSources: newCounter("rolloutd_merge_source_generations_total",
			"Generations replaced by merges (so merged-away minus merges is the net reduction)."),
		errorReasons: newCounterVec("rolloutd_rpc_error_reasons_total",
			"RPCs answered with an error that carries a google.rpc.ErrorInfo reason (OUTCOME_UNKNOWN, NOT_COMMITTED, BACKPRESSURE, RATE_LIMITED, TOO_LARGE, SCAN_INTERRUPTED), by method and reason.",
			"method", "reason"),
		shutdownTimeouts: newCounterVec("rolloutd_shutdown_timeouts_total",
			"Shutdown steps that ran out of their share of --shutdown-timeout, by stage: rpcs (in-flight RPCs were cancelled) or writers (writers were aborted with appends still queued). Exported only until the process exits.",
			"stage"),
	}
	m.collectors = []prometheus.Collector{
		m.rpcDuration, m.recordsAppended, m.bytesAppended, m.alreadyPresent, m.generationsPerRPC,
		m.residentWriters, m.writerOpens, m.openBackoffs, m.openDuration, m.evictions, m.fences, m.logFences, m.checkpoints, m.selfHeals, m.panics, m.decodeFailures,
		m.scannedRecords, m.subscribedRecords, m.merges, m.mergeDuration, m.mergeSources, m.errorReasons, m.shutdownTimeouts,
	}
	m.consumers = newConsumerMetrics()
	m.collectors = append(m.collectors, m.consumers.collectors()...)
	m.exportZeros()
	return m
}

// exportZeros creates the labelled series that alerts watch, so that they
// are exported at 0 from the start and increase() sees their first event.
func (m *Metrics) exportZeros() {
	for _, method := range requestMethods {
		m.decodeFailures.WithLabelValues(method)
	}
	for method, reasons := range map[string][]rolloutv1.ErrorReason{
		"Append":    {rolloutv1.ErrorReason_OUTCOME_UNKNOWN, rolloutv1.ErrorReason_NOT_COMMITTED, rolloutv1.ErrorReason_BACKPRESSURE, rolloutv1.ErrorReason_RATE_LIMITED, rolloutv1.ErrorReason_TOO_LARGE, rolloutv1.ErrorReason_STORE_FULL},
		"Scan":      {rolloutv1.ErrorReason_SCAN_INTERRUPTED},
		"Subscribe": {rolloutv1.ErrorReason_SCAN_INTERRUPTED},
	} {
		for _, r := range reasons {
			m.errorReasons.WithLabelValues(method, r.String())
		}
	}
	for _, stage := range []string{shutdownStageRPCs, shutdownStageWriters} {
		m.shutdownTimeouts.WithLabelValues(stage)
	}
}

// The stages of rolloutd_shutdown_timeouts_total.
const (
	shutdownStageRPCs    = "rpcs"
	shutdownStageWriters = "writers"
)

// observeErrorReason counts an answered error by its ErrorInfo reason, if
// it has one of rolloutd's domain.
func (m *Metrics) observeErrorReason(method string, err error) {
	if err == nil {
		return
	}
	st, ok := status.FromError(err)
	if !ok {
		return
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == ErrorDomain {
			m.errorReasons.WithLabelValues(method, info.GetReason()).Inc()
			return
		}
	}
}

// observeMerge is the shard writers' OnMerge hook.
func (m *Metrics) observeMerge(sources, _ int, took time.Duration) {
	m.merges.Inc()
	m.mergeSources.Add(float64(sources))
	if took > 0 { // 0: a commit's fold, which takes no time of its own
		m.mergeDuration.Observe(took.Seconds())
	}
}
