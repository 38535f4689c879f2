package cel

// Kyverno's mutateExisting, as Kyverno 1.19.1 does it:
//
//   - Triggers: an admission request (CREATE, UPDATE, DELETE) of a policy on at admission
//     that passes the policy's matchConstraints and matchConditions
//     (pkg/cel/policies/mpol/engine/reconciler.go, MatchesMutateExisting, called from
//     pkg/webhooks/resource/mpol/handler.go), or the creation of the policy
//     (pkg/policy/mpol.go: one scan of the targets, or for a target expression one
//     request per existing trigger object, found as pkg/policy/gpol.go getGpolTriggers
//     does).
//   - Targets (pkg/background/mpol/processor.go, Process and collectGVK): the objects of
//     the resources targetMatchConstraints.resourceRules name (matchConstraints when it
//     has none), in the policy's namespace for a NamespacedMutatingPolicy, filtered by
//     objectSelector, namespaceSelector and resourceNames; or the objects
//     targetMatchConstraints.expression returns (getTargetsFromExpression: the trigger's
//     matchConditions first, then the expression on the trigger, one object or
//     {items: [...]}). A subresource in the rule that names the target's resource is
//     the route of the write (resolveTargetRoute).
//   - Each target is evaluated (pkg/cel/policies/mpol/engine/engine.go handlePolicy with
//     target true, compiler/policy.go EvaluateTarget) under the trigger's operation, with
//     object the target, oldObject null, request the trigger's admission request,
//     namespaceObject null; its constraints are matched again and only
//     targetMatchConditions are checked (matchConditions were the trigger's).
//
// Where morph differs, on purpose: the target's namespaceSelector is checked once, when
// the targets are listed, against the real Namespace (Kyverno checks it again on
// evaluation against a Namespace carrying only its name label, which makes a selector
// such as the spec's `test: enabled` match nothing); a target listed twice (a
// cluster-scoped resource under a namespaceSelector) is mutated once; and a rule naming
// a resource or group "*" lists nothing (Kyverno's REST mapper cannot resolve it
// either), while an apiVersion "*" is the resource's preferred version.

import (
	"context"
	"fmt"
	"path"
	"reflect"
	"strings"

	"github.com/google/cel-go/common/types/ref"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/predicates/rules"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/morph-dev/morph/internal/engine"
)

// selectConstraints are the constraints that select and match the targets:
// targetMatchConstraints when it has resource rules, else matchConstraints
// (processor.go Process; engine.go handlePolicy).
func (m *Mutator) selectConstraints() *admissionv1.MatchResources {
	if m.targetConstraints != nil {
		return m.targetConstraints
	}
	return m.constraints
}

// background describes the policy's mutateExisting behaviour for the engine.
func (m *Mutator) background() *engine.Background {
	r := resolver{store: m.d.opts.Objects}
	b := &engine.Background{
		Triggers:               m.triggers,
		Targets:                m.backgroundTargets,
		SkipBackgroundRequests: m.skipBackground,
		TargetResources:        r.routesOf(m.selectConstraints().ResourceRules),
		TriggerResources:       r.routesOf(m.constraints.ResourceRules),
	}
	if m.kprog.targetExpression != nil {
		b.Expression = true
		b.ScanTriggers = m.scanTriggers
	}
	return b
}

// triggers reports whether an admitted request triggers the policy: the namespace of a
// NamespacedMutatingPolicy, matchConstraints (with the request's operation) and
// matchConditions on the request, whose object on DELETE is null and oldObject the
// deleted object.
func (m *Mutator) triggers(ctx context.Context, req *engine.Request) (bool, error) {
	if m.namespace != "" && req.Namespace != m.namespace {
		return false, nil
	}
	obj := req.Object
	if req.Operation == engine.Delete {
		obj = nil
	}
	r := resolver{store: m.d.opts.Objects}
	gvr := r.requestResource(req)
	if rules.IsExemptAdmissionConfigurationResource(attributes(req, nil, gvr)) {
		return false, nil
	}
	attr := attributes(req, obj, gvr)
	ok, mgvr, mgvk, err := r.matchOne(req, attr, m.constraints)
	if err != nil || !ok {
		return false, err
	}
	if len(m.kprog.matchConditions) == 0 {
		return true, nil
	}
	areq := plugincel.CreateAdmissionRequest(attr, metav1.GroupVersionResource(mgvr), metav1.GroupVersionKind(mgvk))
	data, err := newKyvernoData(areq, obj, req.OldObject, r.namespaceObject(req, attr))
	if err != nil {
		return false, err
	}
	m.kprog.bindVariables(ctx, data)
	ok, err = matchAll(ctx, m.kprog.matchConditions, data)
	if err != nil {
		return false, fmt.Errorf("match conditions: %w", err)
	}
	return ok, nil
}

// backgroundTargets lists the targets of a trigger (nil: the scan of a created policy).
func (m *Mutator) backgroundTargets(ctx context.Context, trigger *engine.Request, objs engine.Objects) ([]engine.ObjectRef, error) {
	op := engine.Update // a scan evaluates its targets as updates (processor.go)
	if trigger != nil {
		op = trigger.Operation
	}
	if m.kprog.targetExpression != nil {
		if trigger == nil {
			return nil, fmt.Errorf("targetMatchConstraints.expression needs a trigger: scan with the policy's trigger objects")
		}
		return m.expressionTargets(ctx, trigger, objs)
	}
	return m.listTargets(ctx, m.selectConstraints(), op, objs)
}

// listed is an existing object listed for a rule, with the route of its writes.
type listed struct {
	ref engine.ObjectRef
	obj map[string]any
}

// listRules lists the objects of the resources the rules name, in the policy's namespace
// for a NamespacedMutatingPolicy, each once, in the order of the rules.
func (m *Mutator) listRules(ctx context.Context, rulesList []admissionv1.NamedRuleWithOperations, objs engine.Objects) ([]listed, error) {
	r := resolver{store: m.d.opts.Objects}
	var out []listed
	seen := map[engine.ObjectRef]bool{}
	for _, route := range r.routesOf(rulesList) {
		if route.Resource.Group == "*" || route.Resource.Version == "*" || route.Resource.Resource == "*" {
			continue
		}
		items, err := objs.List(ctx, route.Resource, m.namespace)
		if err != nil {
			return nil, fmt.Errorf("listing %s: %w", route.Resource, err)
		}
		for _, obj := range items {
			md, _ := obj["metadata"].(map[string]any)
			ref := route
			ref.Namespace, _ = md["namespace"].(string)
			ref.Name, _ = md["name"].(string)
			if ref.Name == "" || seen[ref] {
				continue
			}
			seen[ref] = true
			out = append(out, listed{ref: ref, obj: obj})
		}
	}
	return out, nil
}

// listTargets lists the existing objects c selects: its resources, then its
// namespaceSelector (the real Namespace), objectSelector, resourceNames and excluded
// rules, matched as a request of op.
func (m *Mutator) listTargets(ctx context.Context, c *admissionv1.MatchResources, op engine.Operation, objs engine.Objects) ([]engine.ObjectRef, error) {
	items, err := m.listRules(ctx, c.ResourceRules, objs)
	if err != nil {
		return nil, err
	}
	var out []engine.ObjectRef
	for _, it := range items {
		ok, err := m.matchesExisting(ctx, it.ref, it.obj, op, c, objs)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", it.ref, err)
		}
		if ok {
			out = append(out, it.ref)
		}
	}
	return out, nil
}

// matchesExisting matches an existing object against c as a request of op, with its
// real Namespace (the one objs holds, else one as the API server creates it).
func (m *Mutator) matchesExisting(ctx context.Context, ref engine.ObjectRef, obj map[string]any, op engine.Operation, c *admissionv1.MatchResources, objs engine.Objects) (bool, error) {
	req := &engine.Request{
		Kind: ref.Kind, Resource: ref.Resource, SubResource: ref.SubResource, Operation: op,
		Namespace: ref.Namespace, Name: ref.Name, Object: obj,
	}
	if ref.Namespace != "" {
		ns, err := objs.Get(ctx, schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}, "", ref.Namespace)
		if err != nil {
			return false, fmt.Errorf("reading Namespace %s: %w", ref.Namespace, err)
		}
		if ns == nil {
			ns = createdNamespace(ref.Namespace)
		}
		req.NamespaceObject = ns
	}
	r := resolver{store: m.d.opts.Objects}
	ok, _, _, err := r.matchOne(req, attributes(req, obj, ref.Resource), c)
	return ok, err
}

// createdNamespace is a Namespace as the API server creates it: only its name label.
func createdNamespace(name string) map[string]any {
	return map[string]any{
		"apiVersion": "v1", "kind": "Namespace",
		"metadata": map[string]any{"name": name, "labels": map[string]any{"kubernetes.io/metadata.name": name}},
	}
}

// expressionTargets evaluates targetMatchConstraints.expression on the trigger, as
// processor.go getTargetsFromExpression does: the trigger is the object as stored now
// (DELETE: the deleted object), evaluated with oldObject and namespaceObject null; the
// policy's matchConditions must hold on it; the expression returns one object or
// {items: [...]}. Each object's write goes to its resource, with the subresource of the
// target rule naming it; an object the target constraints do not match under the
// trigger's operation is dropped, as Kyverno's evaluation drops it.
func (m *Mutator) expressionTargets(ctx context.Context, trigger *engine.Request, objs engine.Objects) ([]engine.ObjectRef, error) {
	r := resolver{store: m.d.opts.Objects}
	obj := trigger.Object
	if trigger.Operation == engine.Delete {
		obj = trigger.OldObject
	} else if trigger.Name != "" {
		// Kyverno re-reads the trigger (it may have changed since it was admitted).
		cur, err := objs.Get(ctx, r.requestResource(trigger), trigger.Namespace, trigger.Name)
		if err != nil {
			return nil, fmt.Errorf("reading the trigger: %w", err)
		}
		if cur != nil {
			obj = cur
		}
	}
	if obj == nil {
		return nil, fmt.Errorf("the trigger has no object")
	}
	data, err := m.triggerData(trigger, obj)
	if err != nil {
		return nil, err
	}
	m.kprog.bindVariables(ctx, data)
	if ok, err := matchAll(ctx, m.kprog.matchConditions, data); err != nil || !ok {
		return nil, nil //nolint:nilerr // Kyverno's MatchesConditions answers false on an error too
	}
	out, _, err := m.kprog.targetExpression.ContextEval(ctx, data)
	if err != nil {
		return nil, fmt.Errorf("targetMatchConstraints.expression: %w", err)
	}
	native, err := out.ConvertToNative(mapStringAny)
	if err != nil {
		return nil, fmt.Errorf("targetMatchConstraints.expression: %w", err)
	}
	result, _ := native.(map[string]any)
	if result == nil {
		return nil, nil
	}
	var items []map[string]any
	if list, ok := result["items"].([]any); ok {
		for i, it := range list {
			o, ok := it.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("targetMatchConstraints.expression: items[%d] is a %T, not a Kubernetes object", i, it)
			}
			items = append(items, o)
		}
	} else {
		items = append(items, result)
	}
	c := m.selectConstraints()
	var refs []engine.ObjectRef
	seen := map[engine.ObjectRef]bool{}
	for i, o := range items {
		o = normalizeNative(o)
		apiVersion, _ := o["apiVersion"].(string)
		kind, _ := o["kind"].(string)
		md, _ := o["metadata"].(map[string]any)
		name, _ := md["name"].(string)
		gv, err := schema.ParseGroupVersion(apiVersion)
		if err != nil || kind == "" || name == "" {
			return nil, fmt.Errorf("targetMatchConstraints.expression: object %d has no apiVersion, kind and metadata.name", i)
		}
		gvk := gv.WithKind(kind)
		gvr := r.resourceFor(gvk)
		ref := engine.ObjectRef{Resource: gvr, Kind: gvk, SubResource: routeOf(c.ResourceRules, gvr), Name: name}
		ref.Namespace, _ = md["namespace"].(string)
		if seen[ref] {
			continue
		}
		seen[ref] = true
		ok, err := m.matchesExisting(ctx, ref, o, trigger.Operation, c, objs)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", ref, err)
		}
		if ok {
			refs = append(refs, ref)
		}
	}
	return refs, nil
}

// triggerData is the activation Kyverno evaluates on a trigger (the target expression,
// its matchConditions): object the trigger, oldObject and namespaceObject null, request
// the trigger's admission request.
func (m *Mutator) triggerData(trigger *engine.Request, obj map[string]any) (map[string]any, error) {
	r := resolver{store: m.d.opts.Objects}
	gvr := r.requestResource(trigger)
	areq := plugincel.CreateAdmissionRequest(attributes(trigger, obj, gvr), metav1.GroupVersionResource(gvr), metav1.GroupVersionKind(trigger.Kind))
	data, err := newKyvernoData(areq, requestObject(trigger), trigger.OldObject, nil)
	if err != nil {
		return nil, err
	}
	data[varObject], data[varOldObject] = obj, nil
	return data, nil
}

// triggerOf is the trigger of a background request: its Trigger, else (a scan) an
// UPDATE request of the target itself, as Kyverno's processor builds one when its
// UpdateRequest carries no admission request.
func triggerOf(req *engine.Request) *engine.Request {
	if req.Trigger != nil {
		return req.Trigger
	}
	return &engine.Request{
		Kind: req.Kind, Resource: req.Resource, SubResource: req.SubResource, Operation: engine.Update,
		Namespace: req.Namespace, Name: req.Name, Object: req.Object, UserInfo: req.UserInfo, Source: req.Source,
	}
}

// requestObject is the object of an admission request: null on DELETE.
func requestObject(req *engine.Request) map[string]any {
	if req.Operation == engine.Delete {
		return nil
	}
	return req.Object
}

// targetData is the activation of a target's evaluation: object the target, oldObject
// and namespaceObject null, request the trigger's admission request (its object and
// oldObject the trigger's).
func (m *Mutator) targetData(trigger *engine.Request, target map[string]any) (map[string]any, error) {
	r := resolver{store: m.d.opts.Objects}
	gvr := r.requestResource(trigger)
	tobj := requestObject(trigger)
	areq := plugincel.CreateAdmissionRequest(attributes(trigger, tobj, gvr), metav1.GroupVersionResource(gvr), metav1.GroupVersionKind(trigger.Kind))
	data, err := newKyvernoData(areq, tobj, trigger.OldObject, nil)
	if err != nil {
		return nil, err
	}
	data[varObject], data[varOldObject] = target, nil
	return data, nil
}

// matchesTarget matches a background request's object (a target) against the target
// constraints under the request's operation, as Kyverno's evaluation does. The
// namespaceSelector is checked against the request's Namespace object; a request that
// carries none (request.Background's: its targets were listed with their real
// Namespace, see the top of this file) skips it.
func (m *Mutator) matchesTarget(req *engine.Request, attr admission.Attributes) (bool, error) {
	if !m.existing {
		return false, nil
	}
	if m.namespace != "" && req.Namespace != m.namespace {
		return false, nil
	}
	c := m.selectConstraints()
	if req.NamespaceObject == nil {
		c = c.DeepCopy()
		c.NamespaceSelector = &metav1.LabelSelector{}
	}
	r := resolver{store: m.d.opts.Objects}
	ok, _, _, err := r.matchOne(req, attr, c)
	return ok, err
}

// scanTriggers lists the existing objects that trigger a policy whose targets come from
// an expression, as Kyverno's policy controller does when the policy is created
// (pkg/policy/gpol.go getGpolTriggers: matchConstraints' resources, objectSelector,
// namespaceSelector, resourceNames and excluded rules, any operation; in the policy's
// namespace for a NamespacedMutatingPolicy), each as an UPDATE request of the object.
func (m *Mutator) scanTriggers(ctx context.Context, objs engine.Objects) ([]*engine.Request, error) {
	items, err := m.listRules(ctx, m.constraints.ResourceRules, objs)
	if err != nil {
		return nil, err
	}
	c := anyOperation(m.constraints)
	var out []*engine.Request
	for _, it := range items {
		ok, err := m.matchesExisting(ctx, it.ref, it.obj, engine.Update, c, objs)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", it.ref, err)
		}
		if !ok {
			continue
		}
		out = append(out, &engine.Request{
			Kind: it.ref.Kind, Resource: it.ref.Resource, Operation: engine.Update,
			Namespace: it.ref.Namespace, Name: it.ref.Name, Object: it.obj, Source: engine.SourceOriginal,
		})
	}
	return out, nil
}

// routesOf lists the resources rules name, each with its kind and the subresource the
// rule names (the route of a write), once each. A version "*" is the resource's
// preferred version; a group or resource "*", or a resource nothing knows, stays as it
// is with kind "*".
func (r resolver) routesOf(rulesList []admissionv1.NamedRuleWithOperations) []engine.ObjectRef {
	var out []engine.ObjectRef
	seen := map[engine.ObjectRef]bool{}
	for _, rule := range rulesList {
		for _, g := range rule.APIGroups {
			for _, v := range rule.APIVersions {
				for _, res := range rule.Resources {
					res, sub, _ := strings.Cut(res, "/")
					ref := engine.ObjectRef{
						Resource:    schema.GroupVersionResource{Group: g, Version: v, Resource: res},
						Kind:        schema.GroupVersionKind{Group: g, Version: v, Kind: "*"},
						SubResource: sub,
					}
					if g != "*" && res != "*" {
						if kind, ok := r.kindFor(g, res); ok {
							ref.Kind.Kind = kind
							if v == "*" {
								if pv := r.preferredVersion(g, kind); pv != "" {
									ref.Resource.Version, ref.Kind.Version = pv, pv
								}
							}
						}
					}
					if ref.Kind.Kind == "*" || ref.Resource.Version == "*" {
						ref.Kind.Kind = "*"
					}
					if !seen[ref] {
						seen[ref] = true
						out = append(out, ref)
					}
				}
			}
		}
	}
	return out
}

// preferredVersion is the version a group's kind is read at when a rule says "*": a
// CRD's storage version, or the built-in scheme's preferred version of the group.
func (r resolver) preferredVersion(group, kind string) string {
	if r.store != nil {
		if crd, ok := r.store.CRD(group, kind); ok {
			versions, _ := crd["spec"].(map[string]any)["versions"].([]any)
			for _, v := range versions {
				vm, _ := v.(map[string]any)
				if storage, _ := vm["storage"].(bool); storage {
					name, _ := vm["name"].(string)
					return name
				}
			}
		}
	}
	for _, gv := range scheme.Scheme.PrioritizedVersionsForGroup(group) {
		if scheme.Scheme.Recognizes(gv.WithKind(kind)) {
			return gv.Version
		}
	}
	return ""
}

// routeOf is the subresource of the first rule naming gvr's resource (wildcards
// matching, as processor.go resolveTargetRoute does), "" when none names a subresource.
func routeOf(rulesList []admissionv1.NamedRuleWithOperations, gvr schema.GroupVersionResource) string {
	match := func(pattern, s string) bool {
		ok, _ := path.Match(pattern, s)
		return pattern == "*" || pattern == s || ok
	}
	for _, rule := range rulesList {
		for _, g := range rule.APIGroups {
			if !match(g, gvr.Group) {
				continue
			}
			for _, v := range rule.APIVersions {
				if !match(v, gvr.Version) {
					continue
				}
				for _, res := range rule.Resources {
					base, sub, _ := strings.Cut(res, "/")
					if match(base, gvr.Resource) {
						return sub
					}
				}
			}
		}
	}
	return ""
}

var mapStringAny = reflect.TypeOf(map[string]any{})

// normalizeNative turns what CEL's ConvertToNative returns into the engine's value
// model: maps, lists, strings, bools, int64, float64, nil.
func normalizeNative(obj map[string]any) map[string]any {
	out, _ := celNative(obj).(map[string]any)
	return out
}

func celNative(v any) any {
	switch t := v.(type) {
	case ref.Val:
		return celNative(t.Value())
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, e := range t {
			out[k] = celNative(e)
		}
		return out
	case map[ref.Val]ref.Val:
		out := make(map[string]any, len(t))
		for k, e := range t {
			ks, _ := k.Value().(string)
			out[ks] = celNative(e)
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, e := range t {
			out[i] = celNative(e)
		}
		return out
	case []ref.Val:
		out := make([]any, len(t))
		for i, e := range t {
			out[i] = celNative(e)
		}
		return out
	case int:
		return int64(t)
	case int32:
		return int64(t)
	case uint64:
		return int64(t)
	case float32:
		return float64(t)
	}
	return v
}
