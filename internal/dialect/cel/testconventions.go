package cel

import (
	"maps"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/morph-dev/morph/internal/engine"
	"github.com/morph-dev/morph/internal/policy"
)

// This file holds the Kyverno CLI's conventions (Options.KyvernoCLI), which differ from
// the cluster's and which `morph test` follows for suites written for `kyverno test`
// (cmd/cli/kubectl-kyverno/processor and pkg/admissionpolicy/mutate.go of Kyverno
// 1.19.1):
//
//   - a MutatingAdmissionPolicy that no binding names is applied, matched by its
//     matchConstraints alone and without params (in a cluster it does nothing);
//   - a binding's paramRef finds its params among all the context objects of the
//     paramKind, whatever their namespace: with a selector, every param the selector
//     matches is handed to one evaluation as a list (params.items); without one, the
//     first param of that name (or, with only a namespace, of that namespace) is the
//     param. In a cluster a selector evaluates the policy once per param;
//   - a paramRef needs no parameterNotFoundAction (the CLI never denies for a missing
//     param: the policy is evaluated without params).

// kyvernoCLIBinding returns the binding document, with parameterNotFoundAction Allow
// when its paramRef gives none and the Kyverno CLI's conventions apply.
func (d *dialect) kyvernoCLIBinding(doc policy.Document) policy.Document {
	if !d.opts.KyvernoCLI {
		return doc
	}
	spec, _ := doc.Object["spec"].(map[string]any)
	ref, _ := spec["paramRef"].(map[string]any)
	if ref == nil || ref["parameterNotFoundAction"] != nil {
		return doc
	}
	newRef := maps.Clone(ref)
	newRef["parameterNotFoundAction"] = string(admissionv1.AllowAction)
	newSpec := maps.Clone(spec)
	newSpec["paramRef"] = newRef
	obj := maps.Clone(doc.Object)
	obj["spec"] = newSpec
	doc.Object = obj
	return doc
}

// unboundMAP compiles a MutatingAdmissionPolicy no binding names into a mutator of its
// own, as the Kyverno CLI applies it.
func (d *dialect) unboundMAP(doc policy.Document, p *admissionv1.MutatingAdmissionPolicy, prog *program) (*Mutator, error) {
	order, err := orderOf(doc)
	if err != nil {
		return nil, err
	}
	m := &Mutator{
		id:          engine.ID{Order: order, Dialect: "cel", Kind: kindMAP, Name: p.Name},
		d:           d,
		prog:        prog,
		failure:     *p.Spec.FailurePolicy,
		constraints: p.Spec.MatchConstraints,
		reinvoke:    reinvocationOf(p.Spec.ReinvocationPolicy),
	}
	m.targets = resolver{store: d.opts.Objects}.targetsOf(p.Spec.MatchConstraints.ResourceRules, *p.Spec.MatchConstraints.MatchPolicy == admissionv1.Equivalent)
	return m, nil
}

// kyvernoCLIParams collects a binding's params as the Kyverno CLI does (see above).
func (m *Mutator) kyvernoCLIParams() ([]runtime.Object, error) {
	ref := m.paramRef
	store := m.d.opts.Objects
	if store == nil {
		return []runtime.Object{nil}, nil
	}
	gv, err := schema.ParseGroupVersion(m.paramKind.APIVersion)
	if err != nil {
		return nil, err
	}
	candidates := store.List(gv.Group, m.paramKind.Kind, "")
	if ref.Selector != nil {
		sel, err := metav1LabelSelector(ref.Selector)
		if err != nil {
			return nil, err
		}
		list := &unstructured.UnstructuredList{Object: map[string]any{"apiVersion": "v1", "kind": "List"}}
		for _, obj := range candidates {
			if sel.Matches(labelSet(obj)) {
				list.Items = append(list.Items, unstructured.Unstructured{Object: obj})
			}
		}
		if len(list.Items) == 0 {
			return []runtime.Object{nil}, nil
		}
		return []runtime.Object{list}, nil
	}
	for _, obj := range candidates {
		u := &unstructured.Unstructured{Object: obj}
		matches := false
		if ref.Namespace != "" {
			matches = u.GetNamespace() == ref.Namespace
		}
		if ref.Name != "" {
			matches = u.GetName() == ref.Name
		}
		if matches {
			return []runtime.Object{u}, nil
		}
	}
	return []runtime.Object{nil}, nil
}

// noteMatched reports, under the Kyverno CLI's conventions (Options.KyvernoCLI), that
// the policy matched the object ("constraints") or also passed its match conditions
// ("conditions"): what morph test reports as pass or skip when the policy changed
// nothing.
func (m *Mutator) noteMatched(inv *invocation, stage string) {
	if m.d.opts.KyvernoCLI {
		inv.notes = append(inv.notes, engine.Note{Kind: engine.NoteMatched, Reason: stage})
	}
}
