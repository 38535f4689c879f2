package policies

import (
	"log/slog"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"

	"github.com/morph-dev/morph/internal/cluster/crds"
	"github.com/morph-dev/morph/internal/objects"
	"github.com/morph-dev/morph/internal/policy"
)

// newTestSource serves testKind from a fake client holding its CRD and the objects.
func newTestSource(t *testing.T, objs ...*unstructured.Unstructured) (*Source, *dynamicfake.FakeDynamicClient) {
	t.Helper()
	crd := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": testKind.CRDName(), "labels": map[string]any{"app.kubernetes.io/managed-by": "gatekeeper"}},
		"spec":     map[string]any{"versions": []any{map[string]any{"name": "v1", "served": true, "storage": true}}},
	}}
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(k8sruntime.NewScheme(), map[schema.GroupVersionResource]string{
		crdResource: "CustomResourceDefinitionList", namespaceResource: "NamespaceList", testKind.Resource(): "TestList",
	}, crd)
	for _, o := range objs {
		if _, err := client.Resource(testKind.Resource()).Create(t.Context(), o, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	src, err := New(Options{
		Client:    client,
		Kinds:     []crds.Kind{testKind},
		NewLoader: func(*objects.Store) *policy.Loader { return policy.NewLoader(testDialect{}) },
		Logger:    slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := src.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	return src, client
}

func testPolicy(name string, spec map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "test.morph.dev/v1", "kind": "Test",
		"metadata": map[string]any{"name": name, "uid": "uid-" + name, "generation": int64(1)},
		"spec":     spec,
	}}
}

// TestStatusWriterUnderForeignSchema: with a CRD whose status schema prunes morph's
// conditions, the writer writes once per outcome and emits one Event, not one per resync.
func TestStatusWriterUnderForeignSchema(t *testing.T) {
	src, client := newTestSource(t, testPolicy("broken", map[string]any{"error": "bad field"}))
	updates := 0
	client.PrependReactor("update", "tests", func(a clienttesting.Action) (bool, k8sruntime.Object, error) {
		if a.GetSubresource() != "status" {
			return false, nil, nil
		}
		updates++
		u := a.(clienttesting.UpdateAction).GetObject().(*unstructured.Unstructured).DeepCopy()
		delete(u.Object, "status") // pruned by the other owner's schema
		u.SetResourceVersion("42")
		return true, u, nil
	})
	if _, err := src.Load(); err != nil {
		t.Fatal(err)
	}
	fake := record.NewFakeRecorder(10)
	w := &StatusWriter{Source: src, Client: client, Events: &Events{recorder: fake}, written: map[types.UID]writtenStatus{}}
	// The cache is not updated by the reactor: set the version the write returned.
	for range 3 {
		w.writeAll(t.Context(), slog.New(slog.DiscardHandler))
		if obj, ok := src.cached(src.Outcomes()[0].Ref); ok {
			obj.SetResourceVersion("42")
		}
	}
	if updates != 1 {
		t.Errorf("%d status writes, want 1", updates)
	}
	if len(fake.Events) != 1 {
		t.Errorf("%d events, want 1", len(fake.Events))
	} else if e := <-fake.Events; e != `Warning CompileError tests.test.morph.dev/broken: document 1 (Test "broken"): spec.error: bad field` {
		t.Errorf("event %q", e)
	}
}
