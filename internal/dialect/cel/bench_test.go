package cel

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/morph-dev/morph/internal/engine"
)

func benchPod() map[string]any {
	var containers []any
	for i := 0; i < 3; i++ {
		containers = append(containers, map[string]any{
			"name": fmt.Sprintf("c%d", i), "image": "ghcr.io/acme/app:v1",
			"ports":     []any{map[string]any{"containerPort": int64(8080 + i), "protocol": "TCP"}},
			"env":       []any{map[string]any{"name": "A", "value": "1"}, map[string]any{"name": "B", "value": "2"}},
			"resources": map[string]any{"requests": map[string]any{"cpu": "100m", "memory": "128Mi"}},
		})
	}
	return map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": "web", "namespace": "default", "labels": map[string]any{"app": "web"}},
		"spec":     map[string]any{"containers": containers, "serviceAccountName": "web"},
	}
}

func benchSet(b *testing.B, mutation func(i int) string) *engine.Set {
	b.Helper()
	var docs []string
	for i := 0; i < 10; i++ {
		docs = append(docs, fmt.Sprintf(`apiVersion: policies.kyverno.io/v1alpha1
kind: MutatingPolicy
metadata:
  name: p%d
spec:
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: ["v1"]
      resources: ["pods"]
      operations: ["CREATE"]
  mutations:
%s`, i, mutation(i)))
	}
	return compileSet(b, strings.Join(docs, "---\n"))
}

func runBench(b *testing.B, set *engine.Set) {
	pod := benchPod()
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		res, err := set.Mutate(ctx, &engine.Request{Kind: podGVK, Operation: engine.Create, Namespace: "default", Object: pod})
		if err != nil || !res.Changed() {
			b.Fatalf("%v %v", err, res)
		}
	}
}

// BenchmarkApplyConfiguration10 runs a Pod through 10 ApplyConfiguration policies.
func BenchmarkApplyConfiguration10(b *testing.B) {
	runBench(b, benchSet(b, func(i int) string {
		return fmt.Sprintf(`  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: 'Object{metadata: Object.metadata{labels: {"l%d": "v"}}}'
`, i)
	}))
}

// BenchmarkJSONPatch10 runs a Pod through 10 JSONPatch policies.
func BenchmarkJSONPatch10(b *testing.B) {
	runBench(b, benchSet(b, func(i int) string {
		return fmt.Sprintf(`  - patchType: JSONPatch
    jsonPatch:
      expression: '[JSONPatch{op: "add", path: "/metadata/labels/l%d", value: "v"}]'
`, i)
	}))
}

// BenchmarkJSONRoundTripPod is the yardstick: one encoding/json round trip of the Pod.
func BenchmarkJSONRoundTripPod(b *testing.B) {
	pod := benchPod()
	b.ReportAllocs()
	for b.Loop() {
		raw, err := json.Marshal(pod)
		if err != nil {
			b.Fatal(err)
		}
		var out map[string]any
		if err := json.Unmarshal(raw, &out); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCanonicalPod is the cost each evaluation pays to see the Pod as the API
// server's policies do: one round trip through corev1.Pod.
func BenchmarkCanonicalPod(b *testing.B) {
	pod := benchPod()
	b.ReportAllocs()
	for b.Loop() {
		if canonical(pod, podGVK)["status"] == nil {
			b.Fatal("the Pod did not go through its Go type")
		}
	}
}
