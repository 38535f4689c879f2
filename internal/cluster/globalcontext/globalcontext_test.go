package globalcontext

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
)

func object(apiVersion, kind, ns, name string, extra map[string]any) *unstructured.Unstructured {
	o := map[string]any{"apiVersion": apiVersion, "kind": kind, "metadata": map[string]any{"name": name}}
	if ns != "" {
		o["metadata"].(map[string]any)["namespace"] = ns
	}
	for k, v := range extra {
		o[k] = v
	}
	return &unstructured.Unstructured{Object: o}
}

var configMaps = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}

// TestSource reads entries and kubernetesResource objects through informers.
func TestSource(t *testing.T) {
	entry := object("kyverno.io/v2beta1", "GlobalContextEntry", "", "cms", map[string]any{"spec": map[string]any{
		"kubernetesResource": map[string]any{"version": "v1", "resource": "configmaps", "namespace": "a"},
	}})
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		EntryResource: "GlobalContextEntryList",
		configMaps:    "ConfigMapList",
	}, entry, object("v1", "ConfigMap", "a", "one", nil), object("v1", "ConfigMap", "b", "two", nil))
	s := New(client, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := s.GlobalContextEntry(ctx, "cms"); err == nil {
		t.Error("a read before Start: no error")
	}
	s.Start(ctx)
	got, err := s.GlobalContextEntry(ctx, "cms")
	if err != nil {
		t.Fatal(err)
	}
	if got == nil || got["spec"] == nil {
		t.Fatalf("entry cms: got %v", got)
	}
	if missing, err := s.GlobalContextEntry(ctx, "nope"); err != nil || missing != nil {
		t.Errorf("missing entry: %v, %v; want nil, nil", missing, err)
	}
	objs, err := s.ResourceObjects(ctx, "", "v1", "configmaps", "a")
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 1 || objs[0].(map[string]any)["metadata"].(map[string]any)["name"] != "one" {
		t.Errorf("configmaps in a: %v, want one", objs)
	}
	all, err := s.ResourceObjects(ctx, "", "v1", "configmaps", "")
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 2 {
		t.Errorf("configmaps everywhere: %d, want 2", len(all))
	}
	if _, err := s.ResourceObjects(ctx, "", "", "configmaps", ""); err == nil {
		t.Error("no version: no error")
	}
}
