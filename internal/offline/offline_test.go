package offline

import (
	"errors"
	"testing"

	"github.com/morph-dev/morph/internal/engine"
	"github.com/morph-dev/morph/internal/objects"
	"github.com/morph-dev/morph/internal/policy"
)

func doc(obj map[string]any) policy.Document {
	return policy.Document{File: "t.yaml", Index: 1, Object: obj}
}

func pod(name, ns string) map[string]any {
	md := map[string]any{"name": name}
	if ns != "" {
		md["namespace"] = ns
	}
	return map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": md}
}

func TestNewRequest(t *testing.T) {
	store := objects.NewStore()
	team := map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": "team", "labels": map[string]any{"team": "a"}}}
	if err := store.Add(team); err != nil {
		t.Fatal(err)
	}
	t.Run("a namespaced object without namespace is in opts.Namespace", func(t *testing.T) {
		req, err := NewRequest(store, doc(pod("p", "")), RequestOptions{Operation: engine.Create, Namespace: "team"})
		if err != nil {
			t.Fatal(err)
		}
		if req.Namespace != "team" || req.NamespaceObject["metadata"].(map[string]any)["labels"].(map[string]any)["team"] != "a" {
			t.Fatalf("namespace %q, object %v", req.Namespace, req.NamespaceObject)
		}
		if req.Source != engine.SourceOriginal {
			t.Fatalf("source %q", req.Source)
		}
	})
	t.Run("an unknown namespace carries only its name label", func(t *testing.T) {
		req, err := NewRequest(store, doc(pod("p", "other")), RequestOptions{Operation: engine.Create})
		if err != nil {
			t.Fatal(err)
		}
		labels := req.NamespaceObject["metadata"].(map[string]any)["labels"].(map[string]any)
		if len(labels) != 1 || labels["kubernetes.io/metadata.name"] != "other" {
			t.Fatalf("labels %v", labels)
		}
	})
	t.Run("a cluster-scoped object has no namespace", func(t *testing.T) {
		ns := map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": "x"}}
		req, err := NewRequest(store, doc(ns), RequestOptions{Operation: engine.Create, Namespace: "team"})
		if err != nil {
			t.Fatal(err)
		}
		if req.Namespace != "" || req.NamespaceObject["metadata"].(map[string]any)["name"] != "x" {
			t.Fatalf("namespace %q, object %v", req.Namespace, req.NamespaceObject)
		}
	})
	t.Run("the old object is matched by name", func(t *testing.T) {
		old := pod("p", "team")
		req, err := NewRequest(store, doc(pod("p", "")), RequestOptions{Operation: engine.Update, Namespace: "team", Olds: []policy.Document{doc(pod("q", "team")), doc(old)}})
		if err != nil {
			t.Fatal(err)
		}
		if req.OldObject["metadata"].(map[string]any)["name"] != "p" {
			t.Fatalf("old %v", req.OldObject)
		}
		if _, err := NewRequest(store, doc(pod("r", "team")), RequestOptions{Operation: engine.Update, Olds: []policy.Document{doc(old)}}); err == nil {
			t.Fatal("an UPDATE with olds none of which matches is an error")
		}
	})
	t.Run("DELETE without old deletes the object itself", func(t *testing.T) {
		req, err := NewRequest(store, doc(pod("p", "team")), RequestOptions{Operation: engine.Delete})
		if err != nil {
			t.Fatal(err)
		}
		if req.OldObject == nil {
			t.Fatal("no old object")
		}
	})
	t.Run("not an object", func(t *testing.T) {
		if _, err := NewRequest(store, doc(map[string]any{"apiVersion": "v1"}), RequestOptions{}); err == nil {
			t.Fatal("no kind is an error")
		}
	})
}

// nothing is a dialect that handles kind Nothing and compiles to no mutators, or fails
// on a document named "bad".
type nothing struct{}

func (nothing) Name() string                { return "nothing" }
func (nothing) Handles(_, kind string) bool { return kind == "Nothing" }
func (nothing) Compile(docs []policy.Document) (*policy.Bundle, error) {
	b := &policy.Bundle{Warnings: []string{"a warning"}}
	for _, d := range docs {
		if d.Name() == "bad" {
			return b, d.Invalid("spec", nil, "bad policy")
		}
	}
	return b, nil
}

func TestLoad(t *testing.T) {
	newLoader := func(*objects.Store) *policy.Loader { return policy.NewLoader(nothing{}) }
	policyDoc := func(name string) policy.Document {
		return doc(map[string]any{"apiVersion": "x/v1", "kind": "Nothing", "metadata": map[string]any{"name": name}})
	}
	rt, err := Load(newLoader, []policy.Document{doc(pod("ctx", "a"))}, []policy.Document{policyDoc("ok"), doc(pod("among-policies", "a"))}, "p")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := rt.Store.Get("", "Pod", "a", "among-policies"); !ok {
		t.Fatal("a non-policy document among the policies is context")
	}
	if _, ok := rt.Store.Get("", "Pod", "a", "ctx"); !ok {
		t.Fatal("context documents are in the store")
	}
	if len(rt.Warnings) != 1 {
		t.Fatalf("warnings %v", rt.Warnings)
	}
	if _, err := Load(newLoader, nil, []policy.Document{doc(pod("p", "a"))}, "p"); !errors.Is(err, policy.ErrNoPolicies) {
		t.Fatalf("no policies: %v", err)
	}
	_, err = Load(newLoader, nil, []policy.Document{policyDoc("bad")}, "p")
	var le *LoadError
	if !errors.As(err, &le) || len(le.Errs) != 1 || len(le.Warnings) != 1 {
		t.Fatalf("a rejected policy: %#v", err)
	}
}
