package gatekeeper

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/morph-dev/morph/internal/engine"
	"github.com/morph-dev/morph/internal/policy"
)

// workloadDir is the shared benchmark workload, relative to this package.
const workloadDir = "../../../../shared/bench/gatekeeper-workload"

type workload struct {
	pod, ns, expected map[string]any
	podJSON           []byte
}

func loadWorkload(t testing.TB) *workload {
	t.Helper()
	if _, err := os.Stat(workloadDir); err != nil {
		t.Skipf("the workload folder %s is absent", workloadDir)
	}
	wl := &workload{}
	var err error
	if wl.podJSON, err = os.ReadFile(filepath.Join(workloadDir, "pod.json")); err != nil {
		t.Fatal(err)
	}
	wl.pod = decodeJSON(t, wl.podJSON)
	raw, err := os.ReadFile(filepath.Join(workloadDir, "namespace.json"))
	if err != nil {
		t.Fatal(err)
	}
	wl.ns = decodeJSON(t, raw)
	if raw, err = os.ReadFile(filepath.Join(workloadDir, "expected-pod.json")); err != nil {
		t.Fatal(err)
	}
	wl.expected = decodeJSON(t, raw)
	return wl
}

func decodeJSON(t testing.TB, raw []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	return engine.Normalize(m).(map[string]any)
}

func loadSet(t testing.TB, file string, opts Options) *engine.Set {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(workloadDir, file))
	if err != nil {
		t.Fatal(err)
	}
	docs, err := policy.Decode(file, raw)
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(opts).Compile(docs)
	if err != nil {
		t.Fatalf("Compile(%s): %v", file, err)
	}
	if len(b.Warnings) > 0 {
		t.Fatalf("Compile(%s) warnings: %v", file, b.Warnings)
	}
	if len(b.Mutators) != len(docs) {
		t.Fatalf("Compile(%s) = %d mutators, want %d", file, len(b.Mutators), len(docs))
	}
	set, err := engine.NewSet(b.Mutators, b.Finalizers...)
	if err != nil {
		t.Fatal(err)
	}
	return set
}

func podRequest(obj, ns map[string]any, op engine.Operation) *engine.Request {
	return &engine.Request{
		Kind:            schema.GroupVersionKind{Version: "v1", Kind: "Pod"},
		Resource:        schema.GroupVersionResource{Version: "v1", Resource: "pods"},
		Operation:       op,
		Namespace:       "apps",
		Name:            "checkout-7d9f8b6c4-x2lqp",
		Object:          obj,
		NamespaceObject: ns,
		Source:          engine.SourceOriginal,
	}
}

func TestWorkload(t *testing.T) {
	wl := loadWorkload(t)
	ctx := context.Background()
	for _, file := range []string{"mutators-10.yaml", "mutators-100.yaml"} {
		t.Run(file, func(t *testing.T) {
			set := loadSet(t, file, Options{})
			before := engine.DeepCopyMap(wl.pod)
			res, err := set.Mutate(ctx, podRequest(wl.pod, wl.ns, engine.Create))
			if err != nil {
				t.Fatal(err)
			}
			if !engine.Equal(wl.pod, before) {
				t.Fatal("Mutate modified the request's object")
			}
			assertJSONEqual(t, res.Object, wl.expected)
			if res.Passes != 2 {
				t.Errorf("passes = %d, want 2 (one that changes, one that confirms)", res.Passes)
			}
			if got := len(res.Mutated()); got != 10 {
				t.Errorf("%d mutators changed the Pod, want 10: %v", got, res.Mutated())
			}
			// The patch turns the input into the result.
			if len(res.Patch) == 0 {
				t.Fatal("empty patch")
			}

			again, err := set.Mutate(ctx, podRequest(res.Object, wl.ns, engine.Create))
			if err != nil {
				t.Fatal(err)
			}
			if again.Changed() || len(again.Trace) != 0 {
				t.Fatalf("a second run changed the result: %v", again.Patch)
			}

			upd, err := set.Mutate(ctx, podRequest(wl.pod, wl.ns, engine.Update))
			if err != nil {
				t.Fatal(err)
			}
			if file == "mutators-10.yaml" {
				// Every effect but the CREATE-only one. (mutators-100 also holds
				// UPDATE-only mutators, which rightly apply here.)
				want := engine.DeepCopyMap(wl.expected)
				delete(want["spec"].(map[string]any)["securityContext"].(map[string]any), "seccompProfile")
				assertJSONEqual(t, upd.Object, want)
			}
			if _, ok := upd.Object["spec"].(map[string]any)["securityContext"].(map[string]any)["seccompProfile"]; ok {
				t.Error("pod-default-seccomp ran on UPDATE")
			}
		})
	}
	t.Run("mutators-0.yaml", func(t *testing.T) {
		set := loadSet(t, "mutators-0.yaml", Options{})
		res, err := set.Mutate(ctx, podRequest(wl.pod, wl.ns, engine.Create))
		if err != nil {
			t.Fatal(err)
		}
		if res.Changed() || len(res.Trace) != 0 {
			t.Fatalf("mutators-0 changed the Pod: %v", res.Patch)
		}
		if res.Passes > 1 {
			t.Errorf("passes = %d, want at most 1", res.Passes)
		}
	})
}

func assertJSONEqual(t *testing.T, got, want map[string]any) {
	t.Helper()
	g, _ := json.MarshalIndent(got, "", "  ")
	w, _ := json.MarshalIndent(want, "", "  ")
	if string(g) != string(w) {
		t.Fatalf("result differs\n--- got\n%s\n--- want\n%s", g, w)
	}
}

// The workload's benchmarks live in package bench (make bench), beside the JSON round
// trip and the other dialects, so that all are measured in one run.
