package cel

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/morph-dev/morph/internal/engine"
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

// FuzzSplitPointer parses arbitrary JSON Pointers: a pointer that parses prints back to
// itself, and one that does not is rejected by applyPatch too, never with a panic.
func FuzzSplitPointer(f *testing.F) {
	for _, s := range []string{"", "/", "/a/b", "/a~1b/~0c", "/l/-", "/l/01", "a", "/~", "/~2", "//"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, ptr string) {
		segs, err := splitPointer(ptr)
		if err != nil {
			obj := map[string]any{"a": map[string]any{}}
			if _, perr := applyPatch(obj, engine.Patch{{Op: "add", Path: ptr, Value: "v"}}, engine.NewWriter()); perr == nil {
				t.Fatalf("applyPatch accepted %q, which splitPointer rejects: %v", ptr, err)
			}
			return
		}
		if got := engine.Pointer(segs...); got != ptr {
			t.Fatalf("splitPointer(%q) = %q, which prints as %q", ptr, segs, got)
		}
	})
}

// FuzzApplyChanges checks, on arbitrary pairs of JSON objects, that the patch engine.Diff
// computes applies to its source with applyChanges (and applyPatch) to give its target,
// without writing the source; and onto a different original, without failing.
func FuzzApplyChanges(f *testing.F) {
	f.Add(`{"a":{"b":[1,2,3]},"c":"x"}`, `{"a":{"b":[0,2,{"d":1}]},"e~/":null}`)
	f.Add(`{"l":[{"n":"a"},{"n":"b"}]}`, `{"l":[{"n":"new"},{"n":"a","r":{}},{"n":"b"}]}`)
	f.Add(`{}`, `{"status":{}}`)
	f.Fuzz(func(t *testing.T, from, to string) {
		var a, b map[string]any
		if json.Unmarshal([]byte(from), &a) != nil || json.Unmarshal([]byte(to), &b) != nil || a == nil || b == nil {
			return
		}
		engine.Normalize(a)
		engine.Normalize(b)
		before := engine.DeepCopyMap(a)
		p := engine.Diff(a, b)
		got, err := applyChanges(a, b, p, engine.NewWriter())
		if err != nil {
			t.Fatalf("applyChanges %s -> %s: %v", from, to, err)
		}
		if !engine.Equal(got, b) {
			t.Fatalf("applyChanges %s -> %s gave %v", from, to, got)
		}
		if direct, err := applyPatch(a, p, engine.NewWriter()); err != nil || !engine.Equal(direct, b) {
			t.Fatalf("applyPatch %s -> %s gave %v, %v", from, to, direct, err)
		}
		if !engine.Equal(a, before) {
			t.Fatalf("the source was modified")
		}
		// The patch from a to b applied to b itself (an original that differs from the
		// canonical form everywhere the patch goes) must still apply.
		if _, err := applyChanges(b, b, p, engine.NewWriter()); err != nil {
			t.Fatalf("applyChanges onto the target %s: %v", to, err)
		}
	})
}
