package policies

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"

	"github.com/morph-dev/morph/internal/objects"
	"github.com/morph-dev/morph/internal/policy"
)

// TestResourceGet checks that a missing object is nil and no error, so that Kyverno's
// resource.get answers null in the cluster as offline.
func TestResourceGet(t *testing.T) {
	cm := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "a", "namespace": "ns"}, "data": map[string]any{"k": "v"}}}
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		crdResource:                             "CustomResourceDefinitionList",
		namespaceResource:                       "NamespaceList",
		{Version: "v1", Resource: "configmaps"}: "ConfigMapList",
	}, cm)
	s, err := New(Options{Client: client, NewLoader: func(*objects.Store) *policy.Loader { return policy.NewLoader() }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(ctx, "v1", "configmaps", "ns", "a")
	if err != nil || got["data"].(map[string]any)["k"] != "v" {
		t.Fatalf("Get a: %v, %v", got, err)
	}
	if got, err := s.Get(ctx, "v1", "configmaps", "ns", "missing"); err != nil || got != nil {
		t.Errorf("Get missing: %v, %v; want nil, nil", got, err)
	}
}
