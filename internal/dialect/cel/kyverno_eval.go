package cel

import (
	"context"
	"fmt"
	"maps"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/admission"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/mutating/patch"
	celconfig "k8s.io/apiserver/pkg/apis/cel"

	"github.com/morph-dev/morph/internal/engine"
	"github.com/morph-dev/morph/internal/objects"
)

// evaluateKyverno evaluates a Kyverno policy as Kyverno 1.19 does (mpol Policy.evaluate):
// the exceptions first (an exempting one ends the evaluation, the others fill
// `exceptions`), then the match conditions, then each mutation in order on the object
// the previous one produced; the first error fails the policy (its failurePolicy then
// decides, in the engine). It returns the mutated object, or nil when nothing applied.
func (m *Mutator) evaluateKyverno(ctx context.Context, req *engine.Request, va *admission.VersionedAttributes, obj, old map[string]any, inv *invocation) (map[string]any, error) {
	r := resolver{store: m.d.opts.Objects}
	attr := va.Attributes
	var data map[string]any
	var ns *corev1.Namespace
	var err error
	if req.Background {
		// A target of mutateExisting: request is the trigger's, namespaceObject null
		// (background.go).
		data, err = m.targetData(triggerOf(req), obj)
	} else {
		areq := plugincel.CreateAdmissionRequest(attr, metav1.GroupVersionResource(inv.gvr), metav1.GroupVersionKind(va.VersionedKind))
		ns = r.namespaceObject(req, attr)
		data, err = newKyvernoData(areq, obj, old, ns)
	}
	if err != nil {
		return nil, err
	}
	ex, values, err := applyExceptions(ctx, m.exceptions, data)
	if err != nil {
		return nil, err
	}
	if ex != nil {
		inv.notes = append(inv.notes, engine.Note{Kind: engine.NoteExemption, Reason: "PolicyException", Message: fmt.Sprintf("%s by %s/%s", objectName(req, obj), ex.namespace, ex.name)})
		return nil, nil
	}
	data[varExceptions] = values
	p := m.kprog
	if inv.ctrl != nil {
		// Autogen: the rewritten expressions, on the controller object itself.
		p = m.kautogen[inv.ctrl.rewrite]
		if p == nil {
			return nil, nil
		}
		if len(p.rewritten) > 0 {
			for _, e := range p.rewritten {
				inv.notes = append(inv.notes, engine.Note{Kind: engine.NoteRewrite, Reason: inv.ctrl.gvk.Kind, Message: e})
			}
		}
	}
	p.bindVariables(ctx, data)
	conds, what := p.matchConditions, "match conditions"
	if req.Background {
		// On a target only targetMatchConditions are checked: matchConditions were
		// the trigger's (Kyverno's EvaluateTarget).
		conds, what = p.targetMatchConditions, "target match conditions"
	}
	ok, err := matchAll(ctx, conds, data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if !ok {
		return nil, nil
	}
	m.noteMatched(inv, "conditions")
	if len(p.nondeterministic) > 0 {
		inv.notes = append(inv.notes, engine.Note{Kind: engine.NoteNondeterministic, Message: strings.Join(p.nondeterministic, ", ")})
	}
	oi := objectInterfaces{eq: equivalents{r: r, kind: req.Kind}}
	for i, mut := range p.mutations {
		preq := patch.Request{
			MatchedResource:     inv.gvr,
			VersionedAttributes: va,
			ObjectInterfaces:    oi,
			Namespace:           ns,
		}
		if mut.applyConfig {
			tc, err := m.d.types.TypeConverter(va.VersionedKind)
			if err != nil {
				return nil, fmt.Errorf("mutations[%d]: %w", i, err)
			}
			preq.TypeConverter = tc
		}
		next, err := mut.patcherFor(data).Patch(ctx, preq, celconfig.RuntimeCELCostBudget)
		if err != nil {
			return nil, fmt.Errorf("mutations[%d]: %w", i, err)
		}
		va.UpdateObject(next)
		if u, ok := next.(*unstructured.Unstructured); ok {
			data[varObject] = u.Object
		}
	}
	if !va.Dirty {
		return nil, nil
	}
	u, ok := va.VersionedObject.Object().(*unstructured.Unstructured)
	if !ok {
		return nil, fmt.Errorf("the patcher returned a %T, not an unstructured object", va.VersionedObject.Object())
	}
	out := u.Object
	if va.VersionedKind != req.Kind {
		out = withKind(out, req.Kind)
	}
	return out, nil
}

// toUnstructured converts a typed object to its JSON map.
func toUnstructured(obj any) (map[string]any, error) {
	return runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
}

// withRequestNamespace returns obj with metadata.namespace set to the request's
// namespace when a namespaced object names none, as the API server does before
// admission (endpoints/handlers: EnsureObjectNamespaceMatchesRequestNamespace). It is
// set for the evaluation only: Mutate applies to the object what the policy changed, so
// the namespace reaches the result only when a policy changes it.
func (d *dialect) withRequestNamespace(obj map[string]any, req *engine.Request) map[string]any {
	if obj == nil || req.Namespace == "" || metaNamespace(obj) != "" {
		return obj
	}
	store := d.opts.Objects
	if store == nil {
		store = objects.NewStore()
	}
	if !store.Namespaced(req.Kind.Group, req.Kind.Kind) {
		return obj
	}
	out := maps.Clone(obj)
	md, _ := obj["metadata"].(map[string]any)
	md = maps.Clone(md)
	if md == nil {
		md = map[string]any{}
	}
	md["namespace"] = req.Namespace
	out["metadata"] = md
	return out
}
