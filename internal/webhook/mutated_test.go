package webhook

import (
	"context"
	"encoding/json"
	"slices"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"

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

// TestAdmittedHook: Options.Admitted sees every request /mutate admits that is not a
// dry run, DELETE included (without a result), with the webhook group of the call.
func TestAdmittedHook(t *testing.T) {
	m := &labelMutator{name: "team", key: "team", value: "a"}
	type call struct {
		uid, group string
		op         engine.Operation
		result     bool
	}
	var seen []call
	s, err := New(Options{
		Source: bundleSource(&policy.Bundle{Mutators: mutators(m)}), Admission: true,
		Admitted: func(_ context.Context, req *engine.Request, group string, res *engine.Result) {
			seen = append(seen, call{req.UID, group, req.Operation, res != nil})
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	old := func(r *admissionv1.AdmissionRequest) {
		data, _ := json.Marshal(pod(nil))
		r.OldObject.Raw = data
	}
	admissionResponse(t, s.Handler(), "/mutate", admissionBody(t, "dry", pod(nil), dryRun))
	admissionResponse(t, s.Handler(), "/mutate", admissionBody(t, "create", pod(nil)))
	admissionResponse(t, s.Handler(), "/mutate", admissionBody(t, "delete", nil, asOperation(admissionv1.Delete), old))
	admissionResponse(t, s.Handler(), "/mutate/"+MutationGroup(m.descriptor()), admissionBody(t, "grouped", pod(nil)))
	want := []call{
		{"create", "", engine.Create, true},
		{"delete", "", engine.Delete, false},
		{"grouped", MutationGroup(m.descriptor()), engine.Create, true},
	}
	if !slices.Equal(seen, want) {
		t.Errorf("Admitted saw %+v, want %+v", seen, want)
	}
}
