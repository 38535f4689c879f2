// Package request builds the engine's requests, and runs them, the same way for every
// surface: `morph apply` (files), the webhook server (AdmissionReviews) and the cluster
// controller (objects that exist). It decides the things the surfaces would otherwise
// decide each in its own way:
//
//   - which Namespace object a namespaced request's policies see (for namespaceSelector):
//     the one the lookup knows, else one carrying only the kubernetes.io/metadata.name
//     label, which the API server sets on every Namespace;
//   - the namespace of a namespaced object that names none;
//   - the order of mutation and validation: at admission mutation first, then validation
//     of the mutated object; when existing objects are reconciled, validation first unless
//     a policy asks for mutation first (Katalog mutateFirst, spec 000).
//
// It knows no dialect and no transport.
package request

import (
	"context"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/morph-dev/morph/internal/engine"
)

// NamespaceLookup finds the Namespace object of a name: the --context objects offline
// (*objects.Store), an informer's cache in a cluster.
type NamespaceLookup interface {
	Namespace(name string) (map[string]any, bool)
}

// NamespaceObject is the Namespace a request's policies see: for a Namespace itself the
// object (or, on DELETE, the old object); for a namespaced object the one lookup knows,
// else a Namespace carrying only its kubernetes.io/metadata.name label, as the API
// server labels every Namespace; nil for cluster-scoped objects.
func NamespaceObject(lookup NamespaceLookup, kind schema.GroupVersionKind, namespace string, obj, old map[string]any) map[string]any {
	if kind.Group == "" && kind.Kind == "Namespace" {
		if obj == nil {
			return old
		}
		return obj
	}
	if namespace == "" {
		return nil
	}
	if lookup != nil {
		if ns, ok := lookup.Namespace(namespace); ok {
			return ns
		}
	}
	return Namespace(namespace)
}

// Namespace is a Namespace object as the API server creates it: with its name label.
func Namespace(name string) map[string]any {
	return map[string]any{
		"apiVersion": "v1", "kind": "Namespace",
		"metadata": map[string]any{"name": name, "labels": map[string]any{"kubernetes.io/metadata.name": name}},
	}
}

// Mode says how objects are evaluated.
type Mode int

// The evaluation modes.
const (
	// Admission mutates, then validates the mutated object: what the API server's
	// webhooks do.
	Admission Mode = iota
	// Reconcile evaluates existing objects as the controllers that own them do: only the
	// policies that mutate existing objects run (engine.Request.Background), and
	// validation runs first, except for policies that ask for mutation first, whose
	// validation sees the mutated object.
	Reconcile
)

// Policies is what Evaluate runs: a policy set and its validators.
type Policies struct {
	Set        *engine.Set
	Validators *engine.Validators
}

// Evaluation is the outcome of Evaluate.
type Evaluation struct {
	*engine.Result
	// Violations are the validation rules the object broke, in order.
	Violations []engine.Violation
	// ValidatorFailures are the validators whose checks could not run.
	ValidatorFailures []engine.Failure
}

// Denied reports whether a violation refuses the object.
func (e *Evaluation) Denied() bool {
	for _, v := range e.Violations {
		if v.Deny {
			return true
		}
	}
	return false
}

// Evaluate mutates and validates one object in the order the mode asks for. In
// Reconcile mode req.Background is set. An object refused by validation before mutation
// is returned unmutated. The error is the engine's: the request must fail.
func Evaluate(ctx context.Context, p Policies, req *engine.Request, mode Mode) (*Evaluation, error) {
	ev := &Evaluation{}
	var before []engine.Violation
	if mode == Reconcile {
		req.Background = true
		vs, warnings, failures := p.validate(ctx, req, req.Object)
		ev.ValidatorFailures = failures
		for _, v := range vs {
			if !p.mutateFirst(v.ID) {
				before = append(before, v)
			}
		}
		for _, v := range before {
			if v.Deny {
				ev.Result = &engine.Result{Object: req.Object, Warnings: warnings}
				ev.Violations = before
				return ev, nil
			}
		}
	}
	res, err := p.Set.Mutate(ctx, req)
	if err != nil {
		return nil, err
	}
	after, warnings, failures := p.validate(ctx, req, res.Object)
	res.Warnings = append(res.Warnings, warnings...)
	ev.Result = res
	if mode == Admission {
		ev.Violations, ev.ValidatorFailures = after, failures
		return ev, nil
	}
	ev.Violations = before
	for _, v := range after {
		if p.mutateFirst(v.ID) {
			ev.Violations = append(ev.Violations, v)
		}
	}
	ev.ValidatorFailures = append(ev.ValidatorFailures, failures...)
	return ev, nil
}

func (p Policies) validate(ctx context.Context, req *engine.Request, obj map[string]any) ([]engine.Violation, []string, []engine.Failure) {
	if p.Validators == nil {
		return nil, nil, nil
	}
	return p.Validators.Validate(ctx, req, obj)
}

func (p Policies) mutateFirst(id engine.ID) bool {
	return p.Validators != nil && p.Validators.MutateFirst(id)
}
