package objects

import "testing"

func TestStore(t *testing.T) {
	s := NewStore()
	add := func(obj map[string]any) {
		t.Helper()
		if err := s.Add(obj); err != nil {
			t.Fatal(err)
		}
	}
	add(map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": "apps"}})
	add(map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "c1", "namespace": "apps"}})
	add(map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "c2", "namespace": "other"}})
	add(map[string]any{"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": map[string]any{"name": "websites.demo.io"},
		"spec": map[string]any{"group": "demo.io", "scope": "Cluster", "names": map[string]any{"kind": "Website", "plural": "websites"}}})

	if _, ok := s.Namespace("apps"); !ok {
		t.Error("namespace apps not found")
	}
	if got := len(s.List("", "ConfigMap", "")); got != 2 {
		t.Errorf("all configmaps: %d", got)
	}
	if got := len(s.List("", "ConfigMap", "apps")); got != 1 {
		t.Errorf("configmaps in apps: %d", got)
	}
	if k, ok := s.KindFor("demo.io", "websites"); !ok || k != "Website" {
		t.Errorf("KindFor websites: %q %v", k, ok)
	}
	if k, ok := s.KindFor("apps", "Deployments"); !ok || k != "Deployment" {
		t.Errorf("KindFor deployments: %q %v", k, ok)
	}
	if s.Namespaced("demo.io", "Website") {
		t.Error("the CRD says Website is cluster-scoped")
	}
	if !s.Namespaced("", "Pod") || s.Namespaced("", "Namespace") {
		t.Error("Pod is namespaced, Namespace is not")
	}
	if err := s.Add(map[string]any{"kind": "X"}); err == nil {
		t.Error("an object without apiVersion and name must be rejected")
	}
}
