package cel

import (
	"strings"
	"testing"

	"github.com/morph-dev/morph/internal/policy"
)

// FuzzCompile feeds arbitrary expressions to the loader: it must reject or accept them,
// never panic, and a rejection must name the document.
func FuzzCompile(f *testing.F) {
	for _, s := range []string{`Object{}`, `object.metadata.name +`, `[JSONPatch{op: "add", path: "/a", value: 1}]`, `image("x").tag()`, "\x00"} {
		f.Add(s)
	}
	d := New(Options{})
	f.Fuzz(func(t *testing.T, expr string) {
		doc := policy.Document{File: "fuzz.yaml", Index: 1, Object: map[string]any{
			"apiVersion": "policies.kyverno.io/v1", "kind": "MutatingPolicy",
			"metadata": map[string]any{"name": "fuzz"},
			"spec": map[string]any{
				"matchConstraints": map[string]any{"resourceRules": []any{map[string]any{
					"apiGroups": []any{""}, "apiVersions": []any{"v1"}, "resources": []any{"pods"}, "operations": []any{"CREATE"},
				}}},
				"variables": []any{map[string]any{"name": "v", "expression": expr}},
				"mutations": []any{map[string]any{"patchType": "ApplyConfiguration", "applyConfiguration": map[string]any{"expression": expr}}},
			},
		}}
		if _, err := d.Compile([]policy.Document{doc}); err != nil && !strings.Contains(err.Error(), "fuzz.yaml: document 1") {
			t.Fatalf("error does not name the document: %v", err)
		}
	})
}
