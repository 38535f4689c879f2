package main

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"

	"github.com/morph-dev/morph/internal/cluster/crds"
	"github.com/morph-dev/morph/internal/cluster/policies"
	"github.com/morph-dev/morph/internal/objects"
	"github.com/morph-dev/morph/internal/policy"
)

func clusterObject(apiVersion, kind, name string, spec map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": apiVersion, "kind": kind,
		// metadata as the API server returns it
		"metadata": map[string]any{"name": name, "uid": "uid-" + name, "generation": int64(1),
			"resourceVersion": "7", "creationTimestamp": "2026-11-23T08:00:00Z",
			"managedFields": []any{map[string]any{"manager": "kubectl", "operation": "Update", "apiVersion": apiVersion,
				"time": "2026-11-23T08:00:00Z", "fieldsType": "FieldsV1", "fieldsV1": map[string]any{"f:spec": map[string]any{}}}}},
		"status": map[string]any{"conditions": []any{}},
		"spec":   spec,
	}}
}

func clusterAssign(name, location string, value any) *unstructured.Unstructured {
	return clusterObject("mutations.gatekeeper.sh/v1", "Assign", name, map[string]any{
		"applyTo":    []any{map[string]any{"groups": []any{""}, "kinds": []any{"ConfigMap"}, "versions": []any{"v1"}}},
		"location":   location,
		"parameters": map[string]any{"assign": map[string]any{"value": value}},
	})
}

// TestClusterSourceIsolatesPolicies compiles policies read through informers (a fake
// dynamic client) with the real dialects: a policy that does not compile, and two that
// conflict, are left out with their own outcome, and the good one is served. The status
// writer then writes each outcome to its object's status.
func TestClusterSourceIsolatesPolicies(t *testing.T) {
	var objs []k8sruntime.Object
	listKinds := map[schema.GroupVersionResource]string{
		{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}: "CustomResourceDefinitionList",
		{Version: "v1", Resource: "namespaces"}:                                               "NamespaceList",
	}
	for _, k := range crds.Kinds() {
		crd := &unstructured.Unstructured{}
		crd.SetAPIVersion("apiextensions.k8s.io/v1")
		crd.SetKind("CustomResourceDefinition")
		crd.SetName(k.CRDName())
		crd.SetLabels(map[string]string{crds.ManagedByLabel: crds.ManagedByValue})
		var versions []any
		for _, v := range k.Versions {
			versions = append(versions, map[string]any{"name": v, "served": true, "storage": v == k.Storage})
		}
		_ = unstructured.SetNestedSlice(crd.Object, versions, "spec", "versions")
		objs = append(objs, crd)
		listKinds[k.Resource()] = k.Kind + "List"
	}
	good := clusterAssign("good", "data.team", "platform")
	bad := clusterAssign("bad", "data.[oops", "x")
	conflictA := clusterAssign("conflict-a", "data.shape[name: x].v", "a")
	conflictB := clusterAssign("conflict-b", "data.shape.v", "b")
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(k8sruntime.NewScheme(), listKinds, objs...)
	mpol := clusterObject("policies.kyverno.io/v1beta1", "MutatingPolicy", "mpol", map[string]any{
		"matchConstraints": map[string]any{"resourceRules": []any{map[string]any{
			"apiGroups": []any{""}, "apiVersions": []any{"v1"}, "resources": []any{"pods"}, "operations": []any{"CREATE"}}}},
		"mutations": []any{map[string]any{"patchType": "ApplyConfiguration", "applyConfiguration": map[string]any{
			"expression": `Object{metadata: Object.metadata{labels: {"a": "b"}}}`}}},
	})
	katalog := clusterObject("orkestra.orkspace.io/v1", "Katalog", "kat", map[string]any{
		"crds": []any{map[string]any{"name": "gadget",
			"apiTypes":    map[string]any{"group": "x.morph.dev", "version": "v1", "kind": "Gadget", "plural": "gadgets"},
			"operatorBox": map[string]any{"mutation": []any{map[string]any{"field": "spec.replicas", "default": "2"}}}}},
	})
	// Created through the client: the fake's seeding guesses the plural ("assigns").
	for _, o := range []*unstructured.Unstructured{good, bad, conflictA, conflictB, mpol, katalog} {
		var kind crds.Kind
		for _, k := range crds.Kinds() {
			if k.Kind == o.GetKind() {
				kind = k
			}
		}
		if _, err := client.Resource(kind.Resource()).Create(t.Context(), o, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	opts := &dialectOptions{}
	src, err := policies.New(policies.Options{
		Client:    client,
		NewLoader: func(store *objects.Store) *policy.Loader { return newDialects(store, opts) },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	if err := src.Start(ctx); err != nil {
		t.Fatal(err)
	}
	snap, err := src.Load()
	if err != nil {
		t.Fatal(err)
	}
	var served []string
	for _, m := range snap.Bundle.Mutators {
		served = append(served, m.ID.Name)
	}
	slices.Sort(served)
	if strings.Join(served, ",") != "good,kat,mpol" {
		t.Errorf("served mutators %v, want good, kat and mpol", served)
	}
	outcomes := map[string]policies.Outcome{}
	for _, o := range src.Outcomes() {
		outcomes[o.Ref.Name] = o
	}
	for name, want := range map[string]struct {
		ready          bool
		reason, prefix string
	}{
		"good":       {true, policies.ReasonCompiled, ""},
		"mpol":       {true, policies.ReasonCompiled, ""},
		"kat":        {true, policies.ReasonCompiled, ""},
		"bad":        {false, policies.ReasonCompileError, `assign.mutations.gatekeeper.sh/bad: document 1 (Assign "bad"): spec.location: `},
		"conflict-a": {false, policies.ReasonSkipped, "schema conflict at "},
		"conflict-b": {false, policies.ReasonSkipped, "schema conflict at "},
	} {
		got := outcomes[name]
		if got.Ready != want.ready || got.Reason != want.reason || !strings.HasPrefix(got.Message, want.prefix) {
			t.Errorf("%s: outcome %+v, want ready %t reason %s message starting %q", name, got, want.ready, want.reason, want.prefix)
		}
	}

	// The status writer writes each outcome once.
	wctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	w := &policies.StatusWriter{Source: src, Client: client}
	go func() { w.Run(wctx); close(done) }()
	gvr := crds.Kinds()[0].Resource()
	var conds []any
	for i := 0; i < 200 && len(conds) == 0; i++ {
		o, err := client.Resource(gvr).Get(ctx, "bad", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		conds, _, _ = unstructured.NestedSlice(o.Object, "status", "conditions")
		if len(conds) == 0 {
			time.Sleep(10 * time.Millisecond) // the writer runs in its goroutine
		}
	}
	stop()
	<-done
	if len(conds) != 1 {
		t.Fatalf("conditions of bad: %v, want one", conds)
	}
	c := conds[0].(map[string]any)
	if c["type"] != "Ready" || c["status"] != "False" || c["reason"] != policies.ReasonCompileError || c["observedGeneration"] != int64(1) ||
		c["message"] != outcomes["bad"].Message {
		t.Errorf("Ready condition of bad: %v", c)
	}
}

func TestServeClusterFlags(t *testing.T) {
	for _, c := range []struct {
		name string
		o    serveOptions
		want string
	}{
		{"context in cluster mode", serveOptions{contexts: []string{"ns.yaml"}, cluster: clusterOptions{kubeconfig: "k"}}, "--context is for --policies"},
		{"neither", serveOptions{}, "--policies is required"},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.o.admission, c.o.conversion = true, true
			t.Setenv("KUBERNETES_SERVICE_HOST", "")
			err := c.o.check()
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("check: %v, want an error containing %q", err, c.want)
			}
		})
	}
}
