package policies

import (
	"log/slog"
	"testing"
	"time"

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

// wait bounds the waits of these tests for an informer; none asserts a duration.
const wait = 20 * time.Second

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
	} else if e := <-fake.Events; e != `Warning CompileError tests.test.morph.dev/broken: document 1 (Test "broken"): spec.error: Invalid value: bad field` {
		t.Errorf("event %q", e)
	}
}

// TestResourceReads: resource.Get/List read from an informer started at the first read.
func TestResourceReads(t *testing.T) {
	cmGVR := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	cm := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "settings", "namespace": "apps"},
		"data":     map[string]any{"tier": "gold"},
	}}
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(k8sruntime.NewScheme(), map[schema.GroupVersionResource]string{
		crdResource: "CustomResourceDefinitionList", namespaceResource: "NamespaceList", cmGVR: "ConfigMapList",
	}, cm)
	src, err := New(Options{Client: client, Kinds: []crds.Kind{}, NewLoader: func(*objects.Store) *policy.Loader { return policy.NewLoader() }})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := src.Get(t.Context(), "v1", "configmaps", "apps", "settings"); err == nil {
		t.Error("a read before Start succeeded")
	}
	if err := src.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	got, err := src.Get(t.Context(), "v1", "configmaps", "apps", "settings")
	if err != nil {
		t.Fatal(err)
	}
	if tier, _, _ := unstructured.NestedString(got, "data", "tier"); tier != "gold" {
		t.Errorf("Get: %v", got)
	}
	// A missing object is nil and no error (the dialects' ResourceReader contract), so
	// that Kyverno's resource.get answers null in the cluster as offline.
	if got, err := src.Get(t.Context(), "v1", "configmaps", "apps", "missing"); err != nil || got != nil {
		t.Errorf("Get of a missing object: %v, %v; want nil, nil", got, err)
	}
	list, err := src.List(t.Context(), "v1", "configmaps", "other")
	if err != nil || len(list) != 0 {
		t.Errorf("List in another namespace: %v, %v", list, err)
	}
}

// TestContextInformersFollowTheNeeds: the source watches Namespaces only once a loaded
// policy needs them (engine.Descriptor.Needs), never every CRD (only its policy kinds'
// CRDs, by name), and serves the Namespaces it then reads.
func TestContextInformersFollowTheNeeds(t *testing.T) {
	src, client := newTestSource(t, testPolicy("plain", map[string]any{}))
	if _, err := client.Resource(namespaceResource).Create(t.Context(), &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": "team-a", "labels": map[string]any{"team": "a"}},
	}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	reads := func(resource string) (n int) {
		for _, a := range client.Actions() {
			if a.GetResource().Resource == resource && (a.GetVerb() == "list" || a.GetVerb() == "watch") {
				n++
			}
		}
		return n
	}
	snap, err := src.Load()
	if err != nil {
		t.Fatal(err)
	}
	if n := reads("namespaces"); n != 0 {
		t.Errorf("%d lists or watches of Namespaces while no policy needs them", n)
	}
	if _, ok := snap.Namespaces.Namespace("team-a"); ok {
		t.Error("the snapshot has Namespaces no policy needs")
	}
	for _, a := range client.Actions() {
		if a.GetResource() != crdResource || (a.GetVerb() != "list" && a.GetVerb() != "watch") {
			continue
		}
		var fs string
		switch a := a.(type) {
		case clienttesting.ListAction:
			fs = a.GetListRestrictions().Fields.String()
		case clienttesting.WatchAction:
			fs = a.GetWatchRestrictions().Fields.String()
		}
		if fs != "metadata.name="+testKind.CRDName() {
			t.Errorf("%s of CRDs with field selector %q: want only the policy kind's CRD", a.GetVerb(), fs)
		}
	}

	// A policy with a namespaceSelector: Load watches Namespaces and compiles with them.
	if _, err := client.Resource(testKind.Resource()).Create(t.Context(), testPolicy("selective", map[string]any{"namespaceSelector": "team=a"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(wait)
	for len(src.policyObjects()) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("the new policy did not reach the cache within %v", wait)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if snap, err = src.Load(); err != nil {
		t.Fatal(err)
	}
	if n := reads("namespaces"); n == 0 {
		t.Error("Namespaces are not watched although a loaded policy needs them")
	}
	if _, ok := snap.Namespaces.Namespace("team-a"); !ok {
		t.Error("the snapshot compiled after the need lacks the Namespaces")
	}
	if _, ok := src.Namespaces().Namespace("team-a"); !ok {
		t.Error("the request lookup does not find the watched Namespace")
	}
}
