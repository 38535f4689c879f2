package background

import "github.com/prometheus/client_golang/prometheus"

// Metric label values.
const (
	sourceScan      = "scan"
	sourceTrigger   = "trigger"
	sourceReconcile = "reconcile"

	outcomeWritten   = "written"
	outcomeUnchanged = "unchanged"
	outcomeGone      = "gone"
	outcomeDenied    = "denied"
	outcomeFailed    = "failed"
	outcomeRecorded  = "recorded"
	outcomeDropped   = "dropped"
)

// metrics are the background controller's Prometheus metrics, served by the webhook
// server's registry.
type metrics struct {
	work       *prometheus.CounterVec // source, outcome
	conflicts  *prometheus.CounterVec // source
	triggers   *prometheus.CounterVec // outcome
	requests   *prometheus.CounterVec // outcome
	events     *prometheus.CounterVec // reason
	scans      prometheus.Histogram
	queueDepth prometheus.Gauge
}

func newMetrics() *metrics {
	return &metrics{
		work: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "morph_background_work_total",
			Help: "Objects the background controller evaluated, by source (scan, trigger, reconcile) and outcome (written, unchanged, gone, denied, failed).",
		}, []string{"source", "outcome"}),
		conflicts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "morph_background_conflicts_total",
			Help: "Background writes refused because the object changed since it was read (then read, evaluated and written again), by source.",
		}, []string{"source"}),
		triggers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "morph_background_triggers_total",
			Help: "Admitted requests that triggered a policy mutating existing objects, by outcome (recorded as a BackgroundRequest, failed, dropped).",
		}, []string{"outcome"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "morph_background_requests_total",
			Help: "BackgroundRequests the leader finished and deleted, by outcome (done, failed: a target failed every attempt).",
		}, []string{"outcome"}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "morph_background_events_total",
			Help: "Events the background controller emitted, by reason.",
		}, []string{"reason"}),
		scans: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "morph_background_scan_seconds",
			Help:    "Time to list the existing objects of a new or changed policy.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 9),
		}),
		queueDepth: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "morph_background_queue_depth",
			Help: "Items waiting in the leader's background queue (sampled).",
		}),
	}
}

func (m *metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.work, m.conflicts, m.triggers, m.requests, m.events, m.scans, m.queueDepth}
}
