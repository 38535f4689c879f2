package webhook

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics are the server's Prometheus metrics, registered in a registry the server owns.
type metrics struct {
	registry    *prometheus.Registry
	requests    *prometheus.CounterVec   // endpoint, outcome
	latency     *prometheus.HistogramVec // endpoint, outcome
	mutations   *prometheus.CounterVec   // policy
	errors      *prometheus.CounterVec   // policy
	passes      prometheus.Histogram
	conversions *prometheus.CounterVec // outcome
	reloads     *prometheus.CounterVec // outcome
	policies    *prometheus.GaugeVec   // sort
	// certificateReloads counts reloads of rotated serving certificates.
	certificateReloads *prometheus.CounterVec // outcome
	// unknownGroups counts admission requests for a webhook group no loaded policy
	// belongs to (a configuration not yet updated).
	unknownGroups prometheus.Counter
}

// Request outcomes, the "outcome" label of the request metrics.
const (
	outcomeAllowed     = "allowed"     // admitted (or converted) without change
	outcomePatched     = "patched"     // admitted with a patch
	outcomeDenied      = "denied"      // refused by a policy
	outcomeFailed      = "failed"      // refused because a policy failed or the deadline passed
	outcomeBadRequest  = "bad_request" // 4xx: malformed, too large, wrong method or type
	outcomeUnavailable = "unavailable" // 503: no policy set loaded
	outcomePanic       = "panic"       // 500: recovered panic
	outcomeTimeout     = "timeout"     // 504: the deadline passed before an answer was ready
)

func newMetrics() *metrics {
	m := &metrics{
		registry: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "morph", Subsystem: "webhook", Name: "requests_total",
			Help: "Webhook requests by endpoint and outcome.",
		}, []string{"endpoint", "outcome"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "morph", Subsystem: "webhook", Name: "request_duration_seconds",
			Help:    "Time to answer a webhook request, by endpoint and outcome.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"endpoint", "outcome"}),
		mutations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "morph", Name: "mutations_total",
			Help: "Objects changed, by the policy that changed them.",
		}, []string{"policy"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "morph", Name: "policy_errors_total",
			Help: "Policy errors while serving requests, by policy.",
		}, []string{"policy"}),
		passes: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "morph", Name: "mutation_passes",
			Help:    "Passes the engine needed for an object to converge.",
			Buckets: []float64{0, 1, 2, 3, 4, 6, 8, 16, 32},
		}),
		conversions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "morph", Name: "conversions_total",
			Help: "Objects converted by /convert, by outcome (success, failure).",
		}, []string{"outcome"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "morph", Name: "policy_reloads_total",
			Help: "Policy loads by outcome (success, failure).",
		}, []string{"outcome"}),
		policies: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "morph", Name: "policies",
			Help: "Compiled policies served, by sort (mutators, finalizers, validators, converters).",
		}, []string{"sort"}),
		certificateReloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "morph", Name: "certificate_reloads_total",
			Help: "Reloads of changed serving certificate files, by outcome (success, failure: the last good certificate is still served). A failure is counted once until the error changes.",
		}, []string{"outcome"}),
		unknownGroups: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "morph", Subsystem: "webhook", Name: "unknown_group_requests_total",
			Help: "Admission requests for a webhook group (/mutate/<group>) no loaded policy belongs to: update the webhook configuration.",
		}),
	}
	// Both outcomes exist from the start, so that an alert on failures sees the first.
	m.certificateReloads.WithLabelValues("success")
	m.certificateReloads.WithLabelValues("failure")
	m.registry.MustRegister(m.requests, m.latency, m.mutations, m.errors, m.passes, m.conversions, m.reloads, m.policies,
		m.certificateReloads, m.unknownGroups, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func (m *metrics) setPolicies(c PolicyCounts) {
	m.policies.WithLabelValues("mutators").Set(float64(c.Mutators))
	m.policies.WithLabelValues("finalizers").Set(float64(c.Finalizers))
	m.policies.WithLabelValues("validators").Set(float64(c.Validators))
	m.policies.WithLabelValues("converters").Set(float64(c.Converters))
}
