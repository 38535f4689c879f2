package request_test

import (
	"context"
	"fmt"
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/morph-dev/morph/internal/engine"
	"github.com/morph-dev/morph/internal/objects"
	"github.com/morph-dev/morph/internal/request"
)

var (
	podGVK = schema.GroupVersionKind{Version: "v1", Kind: "Pod"}
	nsGVK  = schema.GroupVersionKind{Version: "v1", Kind: "Namespace"}
)

func TestNamespaceObject(t *testing.T) {
	store := objects.NewStore()
	prod := map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": "prod", "labels": map[string]any{"env": "prod"}}}
	if err := store.Add(prod); err != nil {
		t.Fatal(err)
	}
	self := map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": "new"}}
	tests := []struct {
		name      string
		lookup    request.NamespaceLookup
		kind      schema.GroupVersionKind
		namespace string
		obj, old  map[string]any
		guess     request.Guess
		want      map[string]any
	}{
		{name: "known namespace", lookup: store, kind: podGVK, namespace: "prod", want: prod},
		{name: "unknown namespace assumed as created", lookup: store, kind: podGVK, namespace: "dev", guess: request.AssumeCreated, want: request.Namespace("dev")},
		{name: "unknown namespace not guessed", lookup: store, kind: podGVK, namespace: "dev", guess: request.Unknown},
		{name: "no lookup at all", kind: podGVK, namespace: "dev", guess: request.AssumeCreated, want: request.Namespace("dev")},
		{name: "cluster-scoped object", lookup: store, kind: schema.GroupVersionKind{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRole"}},
		{name: "a Namespace is its own", lookup: store, kind: nsGVK, obj: self, want: self},
		{name: "a deleted Namespace is its old object", lookup: store, kind: nsGVK, old: self, want: self},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := request.NamespaceObject(tt.lookup, tt.kind, tt.namespace, tt.obj, tt.old, tt.guess)
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
		})
	}
}

// labelPolicy sets a label; as a validator it denies objects holding label deny.
func labelPolicy(name string, existing bool) engine.Mutator {
	return engine.Mutator{
		Descriptor: engine.Descriptor{
			ID:           engine.ID{Dialect: "test", Kind: "Label", Name: name},
			Targets:      []engine.Target{{Version: "v1", Kind: "Pod", Operations: engine.AllOperations}},
			AdmissionOff: existing, Reinvocation: engine.ReinvokeNever,
		},
		Mutate: func(_ context.Context, _ *engine.Request, obj map[string]any, w *engine.Writer) (map[string]any, error) {
			md, _ := obj["metadata"].(map[string]any)
			labels, _ := md["labels"].(map[string]any)
			if _, ok := labels[name]; ok {
				return obj, nil
			}
			out, md, labels := w.Map(obj), w.Map(md), w.Map(labels)
			labels[name] = "set"
			md["labels"], out["metadata"] = labels, md
			w.Changed("/metadata/labels/" + name)
			return out, nil
		},
	}
}

// requireLabel denies an object without the label.
func requireLabel(name, label string, mutateFirst bool) engine.Validator {
	return engine.Validator{
		Descriptor: engine.Descriptor{
			ID:          engine.ID{Dialect: "test", Kind: "Require", Name: name},
			Targets:     []engine.Target{{Version: "v1", Kind: "Pod", Operations: engine.AllOperations}},
			MutateFirst: mutateFirst,
		},
		Validate: func(_ context.Context, _ *engine.Request, obj map[string]any) ([]engine.Violation, error) {
			labels, _ := obj["metadata"].(map[string]any)["labels"].(map[string]any)
			if _, ok := labels[label]; ok {
				return nil, nil
			}
			return []engine.Violation{{ID: engine.ID{Dialect: "test", Kind: "Require", Name: name}, Message: label + " is required", Deny: true}}, nil
		},
	}
}

func offAtAdmission(v engine.Validator) engine.Validator {
	v.AdmissionOff = true
	return v
}

func TestEvaluateModes(t *testing.T) {
	set, err := engine.NewSet([]engine.Mutator{labelPolicy("admission", false), labelPolicy("reconcile", true)})
	if err != nil {
		t.Fatal(err)
	}
	pod := func() map[string]any {
		return map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": map[string]any{"name": "p"}}
	}
	tests := []struct {
		name        string
		mode        request.Mode
		validators  []engine.Validator
		wantLabels  []string
		wantDenied  bool
		wantViolate []string
	}{
		{name: "admission mutates then validates", mode: request.Admission,
			validators: []engine.Validator{requireLabel("needs-admission", "admission", false)}, wantLabels: []string{"admission"}},
		{name: "reconcile runs every policy, also those off at admission", mode: request.Reconcile, wantLabels: []string{"admission", "reconcile"}},
		{name: "reconcile validates first: denied before mutation", mode: request.Reconcile,
			validators: []engine.Validator{requireLabel("needs-reconcile", "reconcile", false)}, wantDenied: true, wantViolate: []string{"needs-reconcile"}},
		{name: "mutateFirst validates the mutated object", mode: request.Reconcile,
			validators: []engine.Validator{requireLabel("needs-reconcile", "reconcile", true)}, wantLabels: []string{"admission", "reconcile"}},
		{name: "a validator off at admission does not run at admission", mode: request.Admission,
			validators: []engine.Validator{offAtAdmission(requireLabel("needs-reconcile", "reconcile", false))}, wantLabels: []string{"admission"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := request.Policies{Set: set, Validators: engine.NewValidators(tt.validators)}
			ev, err := request.Evaluate(context.Background(), p, &engine.Request{Kind: podGVK, Operation: engine.Update, Object: pod()}, tt.mode)
			if err != nil {
				t.Fatal(err)
			}
			if ev.Denied() != tt.wantDenied {
				t.Fatalf("denied %v, violations %v", ev.Denied(), ev.Violations)
			}
			var violated []string
			for _, v := range ev.Violations {
				violated = append(violated, v.ID.Name)
			}
			if !reflect.DeepEqual(violated, tt.wantViolate) {
				t.Fatalf("violations %v, want %v", violated, tt.wantViolate)
			}
			labels, _ := ev.Object["metadata"].(map[string]any)["labels"].(map[string]any)
			var got []string
			for _, l := range []string{"admission", "reconcile"} {
				if _, ok := labels[l]; ok {
					got = append(got, l)
				}
			}
			if !reflect.DeepEqual(got, tt.wantLabels) {
				t.Fatalf("labels %v, want %v", got, tt.wantLabels)
			}
		})
	}
}

func ExampleNamespaceObject() {
	// Offline, a namespace no lookup knows is seen as the API server creates it.
	ns := request.NamespaceObject(nil, podGVK, "team-a", nil, nil, request.AssumeCreated)
	fmt.Println(ns["metadata"])
	// Output: map[labels:map[kubernetes.io/metadata.name:team-a] name:team-a]
}
