package leader

import "github.com/prometheus/client_golang/prometheus"

// metrics are the elector's Prometheus metrics; the server's registry serves them.
type metrics struct {
	isLeader    prometheus.Gauge
	transitions *prometheus.CounterVec // to
}

func newMetrics() *metrics {
	m := &metrics{
		isLeader: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "morph", Subsystem: "leader", Name: "is_leader",
			Help: "1 while this replica holds the leader Lease and runs the cluster writers, else 0.",
		}),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "morph", Subsystem: "leader", Name: "transitions_total",
			Help: "Changes of this replica's role, by the role it changed to (leader, follower).",
		}, []string{"to"}),
	}
	m.transitions.WithLabelValues("leader")
	m.transitions.WithLabelValues("follower")
	return m
}

func (m *metrics) became(leader bool) {
	if leader {
		m.isLeader.Set(1)
		m.transitions.WithLabelValues("leader").Inc()
		return
	}
	m.isLeader.Set(0)
	m.transitions.WithLabelValues("follower").Inc()
}
