package webhook

import (
	"context"
	"testing"

	"github.com/morph-dev/morph/internal/engine"
	"github.com/morph-dev/morph/internal/policy"
)

// TestMutatedHook: Options.Mutated sees every admitted request that is not a dry run,
// with the engine's result (in a cluster it emits the policies' Events).
func TestMutatedHook(t *testing.T) {
	m := &labelMutator{name: "team", key: "team", value: "a"}
	var seen []string
	s, err := New(Options{
		Source: bundleSource(&policy.Bundle{Mutators: mutators(m)}), Admission: true, Conversion: true,
		Mutated: func(_ context.Context, req *engine.Request, res *engine.Result) {
			if res == nil {
				t.Error("Mutated called without the result")
				return
			}
			seen = append(seen, req.UID)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	admissionResponse(t, s.Handler(), "/mutate", admissionBody(t, "dry", pod(nil), dryRun))
	admissionResponse(t, s.Handler(), "/mutate", admissionBody(t, "real", pod(nil)))
	if len(seen) != 1 || seen[0] != "real" {
		t.Errorf("Mutated saw %v, want only the request that is not a dry run", seen)
	}
}
