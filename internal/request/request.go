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
// Offline, a Namespace the user did not give is taken to be as the API server creates
// it (only its kubernetes.io/metadata.name label); a server does not guess: a policy
// whose namespaceSelector needs a Namespace it does not know fails by its own failure
// policy (see NamespaceObject).
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

// Guess says what NamespaceObject does with a Namespace the lookup does not know.
type Guess bool

// The two answers for an unknown Namespace.
const (
	// AssumeCreated takes it to be as the API server creates it, with only its
	// kubernetes.io/metadata.name label: offline, where the user gives as context only
	// the Namespaces that matter.
	AssumeCreated Guess = true
	// Unknown leaves it nil, so that a policy whose namespaceSelector needs it fails by
	// its own failure policy: a server, where a guess could match a selector (NotIn,
	// DoesNotExist) the real Namespace does not.
	Unknown Guess = false
)

// NamespaceObject is the Namespace a request's policies see: for a Namespace itself the
// object (or, on DELETE, the old object); for a namespaced object the one lookup knows,
// else what guess says; nil for cluster-scoped objects.
func NamespaceObject(lookup NamespaceLookup, kind schema.GroupVersionKind, namespace string, obj, old map[string]any, guess Guess) map[string]any {
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
	if guess == AssumeCreated {
		return Namespace(namespace)
	}
	return nil
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
	// webhooks do. Policies off at admission do not run.
	Admission Mode = iota
	// Reconcile evaluates existing objects as the controllers that own them do
	// (engine.Request.Reconcile: every policy runs, also those off at admission), and
	// validation runs first, except for policies that ask for mutation first, whose
	// validation sees the mutated object.
	Reconcile
)

// Policies is what Evaluate runs: a policy set and its validators.
type Policies struct {
	Set        *engine.Set
	Validators *engine.Validators
	// BackgroundUser is the username the background controller writes as (a cluster's
	// service account, "system:serviceaccount:NS:NAME"): its requests do not trigger the
	// policies that skip background requests (see Triggered). Empty offline.
	BackgroundUser string
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

// Evaluate mutates and validates one object in the order the mode asks for; in
// Reconcile mode it sets req.Reconcile. An object refused by validation before mutation
// is returned unmutated. The error is the engine's: the request must fail.
func Evaluate(ctx context.Context, p Policies, req *engine.Request, mode Mode) (*Evaluation, error) {
	ev := &Evaluation{}
	if mode == Admission {
		res, err := p.Set.Mutate(ctx, req)
		if err != nil {
			return nil, err
		}
		vs, warnings, failures := p.validate(ctx, req, res.Object, nil)
		res.Warnings = append(res.Warnings, warnings...)
		ev.Result, ev.Violations, ev.ValidatorFailures = res, vs, failures
		return ev, nil
	}
	req.Reconcile = true
	// Validation first, by the validators that do not ask for mutation first.
	before, warnings, failures := p.validate(ctx, req, req.Object, func(d engine.Descriptor) bool { return !d.MutateFirst })
	ev.Violations, ev.ValidatorFailures = before, failures
	if ev.Denied() {
		ev.Result = &engine.Result{Object: req.Object, Warnings: warnings}
		return ev, nil
	}
	res, err := p.Set.Mutate(ctx, req)
	if err != nil {
		return nil, err
	}
	res.Warnings = append(warnings, res.Warnings...)
	// Then the validators that asked for mutation first, on the mutated object.
	after, warnings, failures := p.validate(ctx, req, res.Object, func(d engine.Descriptor) bool { return d.MutateFirst })
	res.Warnings = append(res.Warnings, warnings...)
	ev.Result = res
	ev.Violations = append(ev.Violations, after...)
	ev.ValidatorFailures = append(ev.ValidatorFailures, failures...)
	return ev, nil
}

// validate runs the validators keep selects (nil: all).
func (p Policies) validate(ctx context.Context, req *engine.Request, obj map[string]any, keep func(engine.Descriptor) bool) ([]engine.Violation, []string, []engine.Failure) {
	if p.Validators == nil {
		return nil, nil, nil
	}
	return p.Validators.ValidateSome(ctx, req, obj, keep)
}
