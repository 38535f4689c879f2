package leader

import (
	"testing"

	dto "github.com/prometheus/client_model/go"
)

func gaugeValue(t *testing.T, e *Elector) float64 {
	t.Helper()
	var m dto.Metric
	if err := e.metrics.isLeader.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetGauge().GetValue()
}
