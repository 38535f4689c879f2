package globalcontext

import (
	"context"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"
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

// countActions counts the client's actions of a verb on a resource (subresource "" for
// the resource itself).
func countActions(client *dynamicfake.FakeDynamicClient, verb, resource, subresource string) int {
	n := 0
	for _, a := range client.Actions() {
		if a.GetVerb() == verb && a.GetResource().Resource == resource && a.GetSubresource() == subresource {
			n++
		}
	}
	return n
}

// TestSourceResourceNotServed checks that a kubernetesResource the API server does not
// serve is an error at once (not a wait for an informer that cannot sync), remembered
// for a while: the next read does not ask again. The test's context bounds the reads.
func TestSourceResourceNotServed(t *testing.T) {
	widgets := schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		EntryResource: "GlobalContextEntryList",
		widgets:       "WidgetList",
	})
	client.PrependReactor("list", "widgets", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewNotFound(widgets.GroupResource(), "")
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s := New(client, nil)
	s.Start(ctx)
	for i := range 2 {
		_, err := s.ResourceObjects(ctx, "example.com", "v1", "Widgets", "team-a")
		if err == nil || !strings.Contains(err.Error(), "the API server does not serve this resource") || !strings.Contains(err.Error(), "widgets.example.com at v1 in namespace team-a") {
			t.Fatalf("read %d: error %v, want one saying example.com/v1 widgets is not served", i+1, err)
		}
		if ctx.Err() != nil {
			t.Fatal("the read waited for the test's deadline")
		}
	}
	if n := countActions(client, "list", "widgets", ""); n != 1 {
		t.Errorf("%d lists of widgets, want 1 (the failure is remembered)", n)
	}
}

// TestSourceNoCRD checks that without Kyverno's GlobalContextEntry CRD a read is an
// error saying so (a policy using globalContext fails clearly), asked once.
func TestSourceNoCRD(t *testing.T) {
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		EntryResource: "GlobalContextEntryList",
	})
	client.PrependReactor("list", "globalcontextentries", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewNotFound(EntryResource.GroupResource(), "")
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s := New(client, nil)
	s.Start(ctx)
	for i := range 2 {
		got, err := s.GlobalContextEntry(ctx, "any")
		if err == nil || !strings.Contains(err.Error(), "install Kyverno's CustomResourceDefinition globalcontextentries.kyverno.io") {
			t.Fatalf("read %d: %v, %v; want an error naming the missing CRD", i+1, got, err)
		}
	}
	if n := countActions(client, "list", "globalcontextentries", ""); n != 1 {
		t.Errorf("%d lists of entries, want 1", n)
	}
}

// TestSourceOnChange checks that a changed spec or a deletion is told to OnChange, and
// a status-only update is not: events come in order, so the first told must be f's.
func TestSourceOnChange(t *testing.T) {
	spec := map[string]any{"spec": map[string]any{"apiCall": map[string]any{"urlPath": "/api/v1/namespaces"}}}
	e := object("kyverno.io/v2beta1", "GlobalContextEntry", "", "e", spec)
	f := object("kyverno.io/v2beta1", "GlobalContextEntry", "", "f", spec)
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		EntryResource: "GlobalContextEntryList",
	}, e, f)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s := New(client, nil)
	changed := make(chan string, 10)
	s.OnChange(func(name string) { changed <- name })
	s.Start(ctx)
	if _, err := s.GlobalContextEntry(ctx, "e"); err != nil {
		t.Fatal(err)
	}
	entries := client.Resource(EntryResource)
	withStatus := e.DeepCopy()
	withStatus.Object["status"] = map[string]any{"lastRefreshTime": "2026-01-01T00:00:00Z"}
	if _, err := entries.UpdateStatus(ctx, withStatus, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	changedSpec := f.DeepCopy()
	changedSpec.Object["spec"] = map[string]any{"apiCall": map[string]any{"urlPath": "/api/v1/pods"}}
	if _, err := entries.Update(ctx, changedSpec, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := entries.Delete(ctx, "e", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"f", "e"} {
		select {
		case name := <-changed:
			if name != want {
				t.Errorf("change %d told for %q, want %q", i+1, name, want)
			}
		case <-ctx.Done():
			t.Fatalf("change %d not told", i+1)
		}
	}
}
