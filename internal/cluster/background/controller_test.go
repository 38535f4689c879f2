package background

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"

	"github.com/morph-dev/morph/internal/cluster/crds"
	"github.com/morph-dev/morph/internal/engine"
	"github.com/morph-dev/morph/internal/policy"
	"github.com/morph-dev/morph/internal/webhook"
)

// labelPolicy is a policy mutating existing ConfigMaps: it sets the label key to the
// trigger's operation ("scan" without a trigger). Its scan selects scanned, a trigger
// triggered; requests named "trigger" trigger it.
func labelPolicy(key string, scanned, triggered []string) engine.Mutator {
	refs := func(names []string) []engine.ObjectRef {
		out := make([]engine.ObjectRef, len(names))
		for i, n := range names {
			out[i] = configMapTarget(n)
		}
		return out
	}
	ops, _ := engine.OperationsOf("*")
	return engine.Mutator{
		Descriptor: engine.Descriptor{
			ID:      engine.ID{Dialect: "test", Kind: "Policy", Name: key},
			Targets: []engine.Target{{Group: "", Version: "v1", Kind: "ConfigMap", Operations: ops}},
			Background: &engine.Background{
				SkipBackgroundRequests: true,
				Triggers:               func(_ context.Context, req *engine.Request) (bool, error) { return req.Name == "trigger", nil },
				Targets: func(_ context.Context, trigger *engine.Request, _ engine.Objects) ([]engine.ObjectRef, error) {
					if trigger == nil {
						return refs(scanned), nil
					}
					return refs(triggered), nil
				},
			},
		},
		Mutate: func(_ context.Context, req *engine.Request, obj map[string]any, w *engine.Writer) (map[string]any, error) {
			value := "scan"
			if req.Trigger != nil && req.Trigger.Name == "trigger" {
				value = string(req.Trigger.Operation)
			}
			md, _ := obj["metadata"].(map[string]any)
			labels, _ := md["labels"].(map[string]any)
			if labels[key] == value {
				return obj, nil
			}
			out, md := w.Map(obj), w.Map(md)
			labels = w.Map(labels)
			labels[key] = value
			md["labels"], out["metadata"] = labels, md
			w.Changed(engine.Pointer("metadata", "labels", key))
			return out, nil
		},
	}
}

// newFakeClient is client-go's fake dynamic client, which also names the objects
// created with generateName (as the API server does).
func newFakeClient(objs ...runtime.Object) *dynamicfake.FakeDynamicClient {
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		configMaps:                     "ConfigMapList",
		crds.BackgroundRequestResource: "BackgroundRequestList",
	}, objs...)
	var n atomic.Int64
	client.PrependReactor("create", "*", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if u, ok := a.(clienttesting.CreateAction).GetObject().(*unstructured.Unstructured); ok && u.GetName() == "" && u.GetGenerateName() != "" {
			u.SetName(fmt.Sprintf("%s%d", u.GetGenerateName(), n.Add(1)))
		}
		return false, nil, nil
	})
	return client
}

// await polls cond until it holds, failing the test after a bound (a bound on a
// wait, not a timing assertion).
func await(t *testing.T, what string, cond func() error) {
	t.Helper()
	var err error
	for range 200 {
		if err = cond(); err == nil {
			return
		}
		time.Sleep(25 * time.Millisecond)
	}
	t.Fatalf("%s: %v", what, err)
}

func labelOf(t *testing.T, client *dynamicfake.FakeDynamicClient, name, key string) string {
	t.Helper()
	u, err := client.Resource(configMaps).Namespace("apps").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return u.GetLabels()[key]
}

// TestRunScansAndProcessesRequests: a term scans every policy, processes the
// BackgroundRequests a former leader left (mutating the targets of their triggers, as
// the trigger's operation says) and deletes each once done.
func TestRunScansAndProcessesRequests(t *testing.T) {
	policyMutator := labelPolicy("seen", []string{"a"}, []string{"b", "c"})
	spec, err := requestSpec(policyMutator.ID, &engine.Request{
		Kind: schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, Resource: configMaps,
		Operation: engine.Delete, Namespace: "apps", Name: "trigger",
		OldObject: newConfigMap("trigger").Object,
	})
	if err != nil {
		t.Fatal(err)
	}
	left := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "morph.dev/v1alpha1", "kind": "BackgroundRequest",
		"metadata": map[string]any{"name": "bg-left", "namespace": "morph", "uid": "u1"},
		"spec":     spec,
	}}
	client := newFakeClient(newConfigMap("a"), newConfigMap("b"), newConfigMap("c"), newConfigMap("d"), left)
	c, err := New(Options{Client: client, Namespace: "morph"})
	if err != nil {
		t.Fatal(err)
	}
	c.Loaded(&webhook.Snapshot{Bundle: &policy.Bundle{Mutators: []engine.Mutator{policyMutator}}})

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = c.Run(ctx) })
	defer func() { cancel(); wg.Wait() }()

	await(t, "the scan and the left request", func() error {
		for name, want := range map[string]string{"a": "scan", "b": "DELETE", "c": "DELETE", "d": ""} {
			if got := labelOf(t, client, name, "seen"); got != want {
				return fmt.Errorf("ConfigMap %s label %q, want %q", name, got, want)
			}
		}
		return nil
	})
	await(t, "the request deleted", func() error {
		_, err := client.Resource(crds.BackgroundRequestResource).Namespace("morph").Get(context.Background(), "bg-left", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there (error %v)", err)
	})
}

// TestAdmittedRecords: an admitted request that triggers a policy becomes a
// BackgroundRequest (its object as admitted); one that does not, a dry run, morph's
// own request (the policy skips background requests) and a request of another
// webhook group record nothing.
func TestAdmittedRecords(t *testing.T) {
	client := newFakeClient()
	c, err := New(Options{Client: client, Namespace: "morph", Self: "system:serviceaccount:morph:morph"})
	if err != nil {
		t.Fatal(err)
	}
	p := labelPolicy("seen", nil, nil)
	c.Loaded(&webhook.Snapshot{Bundle: &policy.Bundle{Mutators: []engine.Mutator{p}}})
	req := func(name, user string) *engine.Request {
		return &engine.Request{
			Kind: schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, Resource: configMaps,
			Operation: engine.Create, Namespace: "apps", Name: name, Object: newConfigMap(name).Object,
			UserInfo: engine.UserInfo{Username: user},
		}
	}
	mutated := newConfigMap("trigger")
	mutated.SetLabels(map[string]string{"admitted": "yes"})
	c.Admitted(context.Background(), req("trigger", "alice"), "", &engine.Result{Object: mutated.Object})
	c.Admitted(context.Background(), req("other", "alice"), "", nil)
	c.Admitted(context.Background(), req("trigger", "system:serviceaccount:morph:morph"), "", nil)
	c.Admitted(context.Background(), req("trigger", "bob"), "another-group", nil)
	dry := req("trigger", "carol")
	dry.DryRun = true
	c.Admitted(context.Background(), dry, "", nil)
	for len(c.triggers) > 0 {
		c.record(context.Background(), <-c.triggers)
	}
	l, err := client.Resource(crds.BackgroundRequestResource).Namespace("morph").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Items) != 1 {
		t.Fatalf("%d BackgroundRequests, want 1 (alice's trigger): %v", len(l.Items), l.Items)
	}
	id, trigger, err := decodeRequest(&l.Items[0])
	if err != nil {
		t.Fatal(err)
	}
	if id != p.ID || trigger.UserInfo.Username != "alice" {
		t.Errorf("recorded %v by %q", id, trigger.UserInfo.Username)
	}
	if got := (&unstructured.Unstructured{Object: trigger.Object}).GetLabels()["admitted"]; got != "yes" {
		t.Errorf("the trigger is not the object as admitted: labels %v", trigger.Object["metadata"])
	}
	if l.Items[0].GetLabels()[PolicyLabel] != "seen" {
		t.Errorf("labels %v", l.Items[0].GetLabels())
	}
}

// reconciledPolicy is a Katalog-like policy: reconciled, it defaults the label
// replicas to "2" and notes an Event; its validation refuses ConfigMaps labelled
// bad=yes (validation first: mutateFirst false).
func reconciledPolicy() (engine.Mutator, engine.Validator) {
	ops, _ := engine.OperationsOf("CREATE", "UPDATE")
	d := engine.Descriptor{
		ID:         engine.ID{Dialect: "test", Kind: "Katalog", Name: "k", Part: "cm"},
		Targets:    []engine.Target{{Version: "v1", Kind: "ConfigMap", Operations: ops}},
		Resources:  []schema.GroupVersionResource{configMaps},
		Reconciled: true,
	}
	m := labelPolicy("replicas", nil, nil)
	mutate := m.Mutate
	m.Descriptor = d
	m.Mutate = func(ctx context.Context, req *engine.Request, obj map[string]any, w *engine.Writer) (map[string]any, error) {
		if (&unstructured.Unstructured{Object: obj}).GetLabels()["replicas"] != "" {
			return obj, nil
		}
		out, err := mutate(ctx, req, obj, w)
		w.Note(engine.Note{Kind: engine.NoteEvent, Reason: "ConfigMapMutation", Message: `defaults applied: metadata.labels.replicas="2"`})
		return out, err
	}
	v := engine.Validator{Descriptor: d, Validate: func(_ context.Context, _ *engine.Request, obj map[string]any) ([]engine.Violation, error) {
		if (&unstructured.Unstructured{Object: obj}).GetLabels()["bad"] == "yes" {
			return []engine.Violation{{ID: d.ID, Field: "metadata.labels.bad", Message: "bad ConfigMap", Deny: true}}, nil
		}
		return nil, nil
	}}
	return m, v
}

// TestRunReconciles: the objects of a reconciled policy are evaluated in reconcile
// mode and written back when changed, with the policy's Event on the object; an object
// its validation refuses is not mutated, and a Warning Event says why.
func TestRunReconciles(t *testing.T) {
	bad := newConfigMap("bad")
	bad.SetLabels(map[string]string{"bad": "yes"})
	client := newFakeClient(newConfigMap("good"), bad)
	recorder := record.NewFakeRecorder(10)
	c, err := New(Options{Client: client, Namespace: "morph", Recorder: recorder})
	if err != nil {
		t.Fatal(err)
	}
	m, v := reconciledPolicy()
	c.Loaded(&webhook.Snapshot{Bundle: &policy.Bundle{Mutators: []engine.Mutator{m}, Validators: []engine.Validator{v}}})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = c.Run(ctx) })
	defer func() { cancel(); wg.Wait() }()

	await(t, "the good ConfigMap reconciled", func() error {
		if got := labelOf(t, client, "good", "replicas"); got == "" {
			return fmt.Errorf("label replicas %q", got)
		}
		return nil
	})
	events := map[string]bool{}
	for range 2 {
		select {
		case e := <-recorder.Events:
			events[e] = true
		case <-time.After(5 * time.Second):
			t.Fatalf("events %v, want 2", events)
		}
	}
	for _, want := range []string{
		`Normal ConfigMapMutation defaults applied: metadata.labels.replicas="2"`,
		"Warning " + ReasonDenied + " bad ConfigMap",
	} {
		if !events[want] {
			t.Errorf("no event %q among %v", want, events)
		}
	}
	if got := labelOf(t, client, "bad", "replicas"); got != "" {
		t.Errorf("the refused ConfigMap was mutated: replicas %q", got)
	}
}
