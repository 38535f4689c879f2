package policies

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the reconciliation metrics of the cluster policy source and status
// writer, registered on the webhook server's registry.
type metrics struct {
	loads        prometheus.Counter
	loadSeconds  prometheus.Histogram
	policies     *prometheus.GaugeVec
	statusWrites *prometheus.CounterVec
	events       *prometheus.CounterVec
	// contextInformers is 1 for each resource whose objects morph watches beyond
	// the policies (the loaded policies' needs, resource.Get).
	contextInformers *prometheus.GaugeVec
}

func newMetrics() *metrics {
	m := &metrics{
		loads: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "morph_cluster_policy_compiles_total",
			Help: "Compilations of the policies read from the API server (one per change seen).",
		}),
		loadSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "morph_cluster_policy_compile_seconds",
			Help:    "Time to compile the policies read from the API server.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 8),
		}),
		policies: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "morph_cluster_policies",
			Help: "Policy objects read from the API server at the last compilation, by kind and Ready condition.",
		}, []string{"kind", "ready"}),
		statusWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "morph_cluster_status_writes_total",
			Help: "Writes of policy status by the leader, by outcome (success, conflict, failure).",
		}, []string{"outcome"}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "morph_cluster_events_total",
			Help: "Events emitted, by reason.",
		}, []string{"reason"}),
		contextInformers: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "morph_cluster_context_informers",
			Help: "Resources whose objects morph watches for its policies (namespaceSelector, CRD schemas, params, resource.Get), by resource: 1 once started.",
		}, []string{"resource"}),
	}
	return m
}

func (m *metrics) register(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{m.loads, m.loadSeconds, m.policies, m.statusWrites, m.events, m.contextInformers} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("registering the cluster metrics: %w", err)
		}
	}
	return nil
}

func (m *metrics) observeLoad(outcomes []Outcome, took time.Duration) {
	m.loads.Inc()
	m.loadSeconds.Observe(took.Seconds())
	m.policies.Reset()
	for _, o := range outcomes {
		ready := "true"
		if !o.Ready {
			ready = "false"
		}
		m.policies.WithLabelValues(o.Ref.Kind.Kind, ready).Inc()
	}
}
