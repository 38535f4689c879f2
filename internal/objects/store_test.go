package objects

import (
	"strings"
	"testing"
)

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

func TestDefaultNamespace(t *testing.T) {
	s := NewStore()
	for _, o := range []map[string]any{
		{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "a"}},
		{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "b", "namespace": "other"}},
		{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": "team"}},
		{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": map[string]any{"name": "r"}},
	} {
		if err := s.Add(o); err != nil {
			t.Fatal(err)
		}
	}
	s.DefaultNamespace("team")
	a, ok := s.Get("", "ConfigMap", "team", "a")
	if !ok || a["metadata"].(map[string]any)["namespace"] != "team" {
		t.Fatalf("ConfigMap a = %v, %v; want it in team", a, ok)
	}
	if _, ok := s.Get("", "ConfigMap", "", "a"); ok {
		t.Error("ConfigMap a is still found without a namespace")
	}
	if _, ok := s.Get("", "ConfigMap", "other", "b"); !ok {
		t.Error("ConfigMap b left its namespace")
	}
	if _, ok := s.Namespace("team"); !ok {
		t.Error("the Namespace moved")
	}
	if _, ok := s.Get("rbac.authorization.k8s.io", "ClusterRole", "", "r"); !ok {
		t.Error("the ClusterRole moved")
	}
	if got := len(s.List("", "ConfigMap", "team")); got != 1 {
		t.Errorf("List in team = %d objects, want 1", got)
	}
}

func TestRemove(t *testing.T) {
	s := NewStore()
	for _, name := range []string{"a", "b", "c"} {
		if err := s.Add(map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": name, "namespace": "ns"}}); err != nil {
			t.Fatal(err)
		}
	}
	s.Remove("", "ConfigMap", "ns", "b")
	s.Remove("", "ConfigMap", "ns", "absent") // no error, no change
	if _, ok := s.Get("", "ConfigMap", "ns", "b"); ok {
		t.Error("b is still there after Remove")
	}
	var names []string
	for _, o := range s.List("", "ConfigMap", "ns") {
		names = append(names, o["metadata"].(map[string]any)["name"].(string))
	}
	if got := strings.Join(names, ","); got != "a,c" || s.Len() != 2 {
		t.Errorf("after Remove: List = %s, Len = %d; want a,c and 2", got, s.Len())
	}
}
