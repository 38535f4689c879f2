// Package registration keeps the API server's view of morph in line with the policies
// the server serves: the MutatingWebhookConfiguration and ValidatingWebhookConfiguration
// named after morph (Configs), and the conversion caBundle of the CRDs whose converters
// ask for it (CRDCABundles, Katalog's updateCRD). Both are leader-only writers
// (leader.Runnable): they read the server's current snapshot (Policies, fed by
// webhook.Options.Loaded), watch the objects they write with informers and put back any
// other change, and recheck every Resync as a backstop.
//
// Registration waits for the first snapshot, so the API server is never told to call a
// server that has no policies loaded, and for the CA bundle when morph keeps its own
// certificates.
package registration

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/morph-dev/morph/internal/webhook"
)

// Policies is the server's current snapshot. Its Loaded method is the server's
// webhook.Options.Loaded hook. It is safe for concurrent use.
type Policies struct {
	mu   sync.Mutex // guards the fields below
	snap *webhook.Snapshot
	subs []chan struct{}
}

// Loaded records the snapshot the server switched to and wakes the subscribers; it does
// not block.
func (p *Policies) Loaded(snap *webhook.Snapshot) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.snap = snap
	notify(p.subs)
}

// Current is the last snapshot the server switched to, nil before the first.
func (p *Policies) Current() *webhook.Snapshot {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.snap
}

// Changed returns a channel that receives after each Loaded.
func (p *Policies) Changed() <-chan struct{} {
	ch := make(chan struct{}, 1)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.subs = append(p.subs, ch)
	return ch
}

func notify(subs []chan struct{}) {
	for _, ch := range subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// CABundle is the PEM CA bundle written into clientConfig.caBundle; ok is false while
// it is not known yet (the certificate Secret is not loaded). certs.Store implements it.
type CABundle interface {
	CABundle() (bundle []byte, ok bool)
}

// StaticCABundle is a CA bundle given from outside (--ca-file), or none (nil: the API
// server must trust the serving certificate through its own roots).
type StaticCABundle []byte

// CABundle returns b.
func (b StaticCABundle) CABundle() ([]byte, bool) { return b, true }

// Metrics count the registration's writes and failures, for both reconcilers.
type Metrics struct {
	writes *prometheus.CounterVec // object, verb
	errors *prometheus.CounterVec // object
}

// NewMetrics returns the registration metrics.
func NewMetrics() *Metrics {
	return &Metrics{
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "morph", Subsystem: "registration", Name: "writes_total",
			Help: "Writes of the leader to the API server's registration of morph, by object kind and verb (create, update, delete, patch).",
		}, []string{"object", "verb"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "morph", Subsystem: "registration", Name: "errors_total",
			Help: "Failed reconciliations of the registration, by object kind (retried).",
		}, []string{"object"}),
	}
}

// Collectors are the metrics to register.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.writes, m.errors}
}
