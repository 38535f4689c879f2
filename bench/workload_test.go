// Package bench holds morph's benchmarks over fixed workloads, all in one package so
// that `make bench` measures every engine path and its JSON round-trip baseline in the
// same run. testdata/gatekeeper-workload is a copy of shared/bench/gatekeeper-workload;
// TestWorkloadCopyIsCurrent keeps it identical when that folder is present.
package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/morph-dev/morph/internal/dialect/gatekeeper"
	"github.com/morph-dev/morph/internal/engine"
	"github.com/morph-dev/morph/internal/jsonvalue"
	"github.com/morph-dev/morph/internal/objects"
	"github.com/morph-dev/morph/internal/policy"
)

const workload = "testdata/gatekeeper-workload"

func readJSON(tb testing.TB, name string) (map[string]any, []byte) {
	tb.Helper()
	raw, err := os.ReadFile(filepath.Join(workload, name))
	if err != nil {
		tb.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		tb.Fatal(err)
	}
	return engine.Normalize(m).(map[string]any), raw
}

// compileWorkload builds the engine set for a mutator file; repeat > 1 adds renamed
// copies of the non-matching mutators (for the 1000-mutator variant).
func compileWorkload(tb testing.TB, file string, repeat int) *engine.Set {
	tb.Helper()
	raw, err := os.ReadFile(filepath.Join(workload, file))
	if err != nil {
		tb.Fatal(err)
	}
	docs, err := policy.Decode(file, raw)
	if err != nil {
		tb.Fatal(err)
	}
	base := len(docs)
	for r := 1; r < repeat; r++ {
		for _, d := range docs[:base] {
			if strings.HasPrefix(d.Name(), "pod-") && matchesWorkloadPod(d) {
				continue
			}
			c := engine.DeepCopyMap(d.Object)
			c["metadata"].(map[string]any)["name"] = fmt.Sprintf("%s-copy%d", d.Name(), r)
			docs = append(docs, policy.Document{File: file, Index: d.Index, Object: c})
		}
	}
	store := objects.NewStore()
	ns, _ := readJSON(tb, "namespace.json")
	if err := store.Add(ns); err != nil {
		tb.Fatal(err)
	}
	bundle, _, err := policy.NewLoader(gatekeeper.New(gatekeeper.Options{Objects: store})).Load(docs)
	if err != nil {
		tb.Fatal(err)
	}
	if len(bundle.Warnings) > 0 {
		tb.Fatalf("unexpected load warnings: %v", bundle.Warnings)
	}
	set, err := engine.NewSet(bundle.Mutators, bundle.Finalizers...)
	if err != nil {
		tb.Fatal(err)
	}
	return set
}

// matchingNames are the 10 mutators of the workload that match pod.json (its README).
var matchingNames = map[string]bool{
	"pod-containers-pull-always": true, "pod-containers-no-privilege-escalation": true,
	"pod-default-seccomp": true, "pod-envoy-memory-limit": true, "pod-payments-priority-class": true,
	"pod-label-cost-center": true, "pod-annotation-policy-owner": true, "pod-checkout-args-merge": true,
	"pod-args-prune-debug": true, "pod-image-mirror": true,
}

func matchesWorkloadPod(d policy.Document) bool { return matchingNames[d.Name()] }

func workloadRequest(pod, ns map[string]any) *engine.Request {
	return &engine.Request{
		Kind:            schema.GroupVersionKind{Version: "v1", Kind: "Pod"},
		Operation:       engine.Create,
		Namespace:       "apps",
		Name:            "checkout-7d9f8b6c4-x2lqp",
		Object:          pod,
		NamespaceObject: ns,
		Source:          engine.SourceOriginal,
	}
}

func TestWorkloadCopyIsCurrent(t *testing.T) {
	shared := filepath.Join("..", "..", "shared", "bench", "gatekeeper-workload")
	entries, err := os.ReadDir(shared)
	if err != nil {
		t.Skipf("%s not present: nothing to compare the copy with", shared)
	}
	for _, e := range entries {
		want, err := os.ReadFile(filepath.Join(shared, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(workload, e.Name()))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s differs from %s: copy it again", filepath.Join(workload, e.Name()), shared)
		}
	}
}

// TestWorkloadResult checks the benchmark computes the right thing: the expected Pod
// for 10 and 100 mutators, no change for 0, idempotence, and UPDATE without the
// CREATE-only mutator.
func TestWorkloadResult(t *testing.T) {
	ns, _ := readJSON(t, "namespace.json")
	expected, _ := readJSON(t, "expected-pod.json")
	for _, tc := range []struct {
		file   string
		repeat int
	}{{"mutators-10.yaml", 1}, {"mutators-100.yaml", 1}, {"mutators-100.yaml", 11}} {
		t.Run(fmt.Sprintf("%s-x%d", tc.file, tc.repeat), func(t *testing.T) {
			set := compileWorkload(t, tc.file, tc.repeat)
			pod, _ := readJSON(t, "pod.json")
			res, err := set.Mutate(context.Background(), workloadRequest(pod, ns))
			if err != nil {
				t.Fatal(err)
			}
			if !engine.Equal(res.Object, expected) {
				got, _ := json.MarshalIndent(res.Object, "", "  ")
				t.Fatalf("result differs from expected-pod.json:\n%s", got)
			}
			if res.Passes != 2 {
				t.Errorf("passes = %d, want 2 as Gatekeeper", res.Passes)
			}
			if n := len(res.Mutated()); n != 10 {
				t.Errorf("%d mutators changed the Pod, want 10", n)
			}
			again, err := set.Mutate(context.Background(), workloadRequest(res.Object, ns))
			if err != nil {
				t.Fatal(err)
			}
			if again.Changed() {
				t.Fatalf("not idempotent: %v", again.Patch)
			}
			update := workloadRequest(pod, ns)
			update.Operation = engine.Update
			upd, err := set.Mutate(context.Background(), update)
			if err != nil {
				t.Fatal(err)
			}
			// On UPDATE the CREATE-only pod-default-seccomp does not apply, every other
			// matching mutator does, and so do the UPDATE-only mutators of the file.
			want := map[string]bool{}
			for n := range matchingNames {
				want[n] = n != "pod-default-seccomp"
			}
			if tc.file == "mutators-100.yaml" {
				for i := 0; i < 3; i++ {
					want[fmt.Sprintf("pod-update-only-%d", i)] = true
				}
			}
			got := map[string]bool{}
			for _, id := range upd.Mutated() {
				got[id.Name] = true
			}
			for n, w := range want {
				if got[n] != w {
					t.Errorf("UPDATE: %s changed the Pod = %v, want %v", n, got[n], w)
				}
			}
			for n := range got {
				if _, ok := want[n]; !ok {
					t.Errorf("UPDATE: unexpected change by %s", n)
				}
			}
		})
	}
	t.Run("mutators-0", func(t *testing.T) {
		set := compileWorkload(t, "mutators-0.yaml", 1)
		pod, _ := readJSON(t, "pod.json")
		res, err := set.Mutate(context.Background(), workloadRequest(pod, ns))
		if err != nil {
			t.Fatal(err)
		}
		if res.Changed() || res.Passes != 1 {
			t.Fatalf("want unchanged after 1 pass, got %d passes and %v", res.Passes, res.Patch)
		}
	})
}

// BenchmarkJSONRoundTrip is the baseline: encoding/json decode of pod.json into
// map[string]any and encode back.
func BenchmarkJSONRoundTrip(b *testing.B) {
	_, raw := readJSON(b, "pod.json")
	b.ReportAllocs()
	for b.Loop() {
		var m map[string]any
		if err := json.Unmarshal(raw, &m); err != nil {
			b.Fatal(err)
		}
		if _, err := json.Marshal(m); err != nil {
			b.Fatal(err)
		}
	}
}

func benchWorkloads() []struct {
	name   string
	file   string
	repeat int
} {
	return []struct {
		name   string
		file   string
		repeat int
	}{
		{"mutators-0", "mutators-0.yaml", 1},
		{"mutators-10", "mutators-10.yaml", 1},
		{"mutators-100", "mutators-100.yaml", 1},
		{"mutators-1000", "mutators-100.yaml", 11},
	}
}

// BenchmarkGatekeeperWorkload is the Mutate of the workload's README: per op a fresh
// request and the full mutation (all passes) with the patch.
func BenchmarkGatekeeperWorkload(b *testing.B) {
	ns, _ := readJSON(b, "namespace.json")
	pod, _ := readJSON(b, "pod.json")
	ctx := context.Background()
	for _, w := range benchWorkloads() {
		set := compileWorkload(b, w.file, w.repeat)
		b.Run(w.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := set.Mutate(ctx, workloadRequest(pod, ns)); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("deepcopy+"+w.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := set.Mutate(ctx, workloadRequest(engine.DeepCopyMap(pod), ns)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkGatekeeperWebhookPath decodes the raw pod.json bytes, mutates, and encodes
// the patch, as a webhook does.
func BenchmarkGatekeeperWebhookPath(b *testing.B) {
	ns, _ := readJSON(b, "namespace.json")
	_, raw := readJSON(b, "pod.json")
	ctx := context.Background()
	for _, w := range benchWorkloads()[1:3] {
		set := compileWorkload(b, w.file, w.repeat)
		b.Run(w.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				pod, err := jsonvalue.DecodeObject(raw)
				if err != nil {
					b.Fatal(err)
				}
				res, err := set.Mutate(ctx, workloadRequest(pod, ns))
				if err != nil {
					b.Fatal(err)
				}
				if _, err := res.Patch.JSON(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
