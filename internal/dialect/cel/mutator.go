package cel

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/mutating/patch"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/predicates/rules"
	celconfig "k8s.io/apiserver/pkg/apis/cel"

	"github.com/morph-dev/morph/internal/engine"
	"github.com/morph-dev/morph/internal/objects"
	"github.com/morph-dev/morph/internal/policy"
)

// Mutator is one compiled policy: a MutatingAdmissionPolicy with one of its bindings, or
// a Kyverno MutatingPolicy. It implements engine.Mutator.
type Mutator struct {
	id   engine.ID
	d    *dialect
	prog *program
	// kprog is a Kyverno policy's program (prog is nil then); kautogen its programs
	// rewritten for the pod controllers, by replacement set.
	kprog    *kyvernoProgram
	kautogen map[string]*kyvernoProgram
	targets  []engine.Target
	reinvoke engine.Reinvocation
	failure  admissionv1.FailurePolicyType

	constraints *admissionv1.MatchResources
	// binding is the binding's matchResources (MutatingAdmissionPolicy only), intersected
	// with constraints; nil matches everything.
	binding   *admissionv1.MatchResources
	paramKind *admissionv1.ParamKind
	paramRef  *admissionv1.ParamRef

	// Kyverno only.
	kyverno   bool
	namespace string // a NamespacedMutatingPolicy mutates its own namespace only
	admission bool
	existing  bool
	// targetConstraints are targetMatchConstraints when they have resource rules (else
	// nil: matchConstraints select the targets, as in Kyverno); targetOnly says the
	// policy has target rules or a target expression, and so does not mutate the
	// trigger at admission.
	targetConstraints *admissionv1.MatchResources
	targetOnly        bool
	timeout           time.Duration
	controllers       []controller
	autogen           *admissionv1.MatchResources
	exceptions        []boundException

	// skipBackground is evaluation.skipBackgroundRequests (default true).
	skipBackground bool
	// readsNamespace is set when the policy's expressions read namespaceObject.
	readsNamespace bool
}

// compiled is the policy as the engine runs it.
func (m *Mutator) compiled() engine.Mutator {
	fp := engine.FailClose // Fail, the default, fails the request
	if m.failure == admissionv1.Ignore {
		fp = engine.FailIgnore // Ignore drops the policy's changes
	}
	d := engine.Descriptor{
		ID:            m.id,
		Targets:       m.targets,
		Reinvocation:  m.reinvoke,
		FailurePolicy: fp,
		// evaluation.admission.enabled false keeps a Kyverno policy out of admission.
		AdmissionOff: m.kyverno && !m.admission,
		Needs:        m.needs(),
	}
	if m.existing {
		// evaluation.mutateExisting.enabled: existing objects, triggered and selected
		// as Kyverno's background controller does (background.go).
		d.Background = m.background()
	}
	if m.timeout > 0 {
		// Kyverno's webhookConfiguration.timeoutSeconds (10s by default), the evaluation
		// deadline the generated webhook configuration carries too. MutatingAdmissionPolicies
		// have none.
		d.Timeout, d.TimeoutField = m.timeout, "webhookConfiguration.timeoutSeconds"
	}
	return engine.Mutator{Descriptor: d, Mutate: m.Mutate}
}

// needs lists what the policy reads from the cluster (engine.Descriptor.Needs): the
// Namespaces for a namespaceSelector or namespaceObject (in the policy or an exception
// bound to it), the CRDs for a resource rule
// that names a custom resource (its kind and scope), the params' resource.
func (m *Mutator) needs() []schema.GroupVersionResource {
	var out []schema.GroupVersionResource
	namespaces, crds := m.readsNamespace, false
	for _, e := range m.exceptions {
		// An exception's matchConditions may read namespaceObject too.
		namespaces = namespaces || mentionsNamespaceObject(e.doc)
	}
	builtin := objects.NewStore() // knows the built-in resources only
	for _, c := range []*admissionv1.MatchResources{m.constraints, m.binding, m.targetConstraints, m.autogen} {
		if c == nil {
			continue
		}
		if sel := c.NamespaceSelector; sel != nil && (len(sel.MatchLabels) > 0 || len(sel.MatchExpressions) > 0) {
			namespaces = true
		}
		for _, rules := range [][]admissionv1.NamedRuleWithOperations{c.ResourceRules, c.ExcludeResourceRules} {
			for _, r := range rules {
				for _, g := range r.APIGroups {
					for _, res := range r.Resources {
						res, _, _ = strings.Cut(res, "/")
						if _, ok := builtin.KindFor(g, res); !ok || g == "*" || res == "*" {
							crds = true
						}
					}
				}
			}
		}
	}
	if namespaces {
		out = append(out, objects.NamespaceResource)
	}
	if crds {
		out = append(out, objects.CRDResource)
	}
	if m.paramKind != nil {
		if gv, err := schema.ParseGroupVersion(m.paramKind.APIVersion); err == nil {
			out = append(out, resolver{store: m.d.opts.Objects}.resourceFor(gv.WithKind(m.paramKind.Kind)))
		}
	}
	return out
}

// mentionsNamespaceObject reports whether a policy document's spec reads the
// namespaceObject variable (in any expression).
func mentionsNamespaceObject(doc policy.Document) bool {
	spec, err := json.Marshal(doc.Object["spec"])
	return err == nil && bytes.Contains(spec, []byte(varNamespaceObject))
}

// anyOperation copies match constraints with every rule's operations set to "*": an
// existing object is not under any operation.
func anyOperation(c *admissionv1.MatchResources) *admissionv1.MatchResources {
	out := c.DeepCopy()
	for _, rules := range [][]admissionv1.NamedRuleWithOperations{out.ResourceRules, out.ExcludeResourceRules} {
		for i := range rules {
			rules[i].Operations = []admissionv1.OperationType{admissionv1.OperationAll}
		}
	}
	return out
}

// invocation is what match found and Mutate uses.
type invocation struct {
	gvr schema.GroupVersionResource
	gvk schema.GroupVersionKind
	// ctrl is the pod controller whose template is mutated (autogen), or nil.
	ctrl *controller
	// warnings are the mutations that failed under failurePolicy Ignore.
	warnings []string
	// notes are what the evaluation reports beyond the object (exemptions, skipped
	// mutations), given to the engine's Writer by Mutate.
	notes []engine.Note
}

// match decides whether the request is one for this policy, as the API server's
// dispatcher does: the policy's matchConstraints, then the binding's matchResources.
func (m *Mutator) match(ctx context.Context, req *engine.Request, obj map[string]any) (*invocation, error) {
	if rules.IsExemptAdmissionConfigurationResource(attributes(req, nil, req.Resource)) {
		return nil, nil
	}
	if m.namespace != "" && req.Namespace != m.namespace && metaNamespace(obj) != m.namespace {
		return nil, nil
	}
	r := resolver{store: m.d.opts.Objects}
	attr := attributes(req, obj, r.requestResource(req))
	if req.Background {
		// Existing objects (the engine runs only mutateExisting policies on them) are
		// matched by the policy's target constraints (background.go).
		ok, err := m.matchesTarget(req, attr)
		if err != nil || !ok {
			return nil, err
		}
		return &invocation{gvr: r.requestResource(req), gvk: req.Kind}, nil
	}
	if m.targetOnly {
		return nil, nil
	}
	constraints := m.constraints
	var ctrl *controller
	if c := controllerOf(m.controllers, req.Kind); c != nil {
		constraints, ctrl = m.autogen, c
	}
	ok, gvr, gvk, err := r.matchOne(req, attr, constraints)
	if err != nil || !ok {
		return nil, err
	}
	if m.binding != nil {
		ok, _, _, err := r.matchOne(req, attr, m.binding)
		if err != nil || !ok {
			return nil, err
		}
	}
	return &invocation{gvr: gvr, gvk: gvk, ctrl: ctrl}, nil
}

func metaNamespace(obj map[string]any) string {
	ns, _ := obj["metadata"].(map[string]any)["namespace"].(string)
	return ns
}

// Mutate is the policy's engine.MutateFunc: it matches the request as the API server's
// dispatcher does (the full match, params and binding run once per invocation), then
// evaluates the policy with the API server's
// patchers on obj (and the old object) as the API server's policies see a built-in
// object, decoded into its Go type and back (see canonical), and applies what the policy
// changed to obj itself, through w, recording every changed path. Fields the policy did
// not touch keep obj's own form: the decoding is how the policy sees the object, not a
// change of the policy's.
func (m *Mutator) Mutate(ctx context.Context, req *engine.Request, obj map[string]any, w *engine.Writer) (map[string]any, error) {
	inv, err := m.match(ctx, req, obj)
	if err != nil || inv == nil {
		return obj, err
	}
	m.noteMatched(inv, "constraints")
	in := m.d.withRequestNamespace(canonical(obj, req.Kind), req)
	var old map[string]any
	if !req.Background {
		// A background target is evaluated with oldObject null (background.go).
		old = m.d.withRequestNamespace(canonical(req.OldObject, req.Kind), req)
	}
	out, err := m.evaluateWithin(ctx, req, in, old, inv)
	for _, text := range inv.warnings {
		w.Warn(text)
	}
	for _, n := range inv.notes {
		w.Note(n)
	}
	if err != nil || out == nil {
		return obj, err
	}
	// out may share containers with in, and so with the request's object (the patchers
	// return their input when nothing applies): it is read, never written. Its numbers
	// need no normalizing: Diff and Equal compare numbers by value.
	changes := engine.Diff(in, out)
	if len(changes) == 0 {
		return obj, nil
	}
	next, err := applyChanges(obj, out, changes, w)
	if err != nil {
		return obj, fmt.Errorf("applying the policy's changes to the object: %w", err)
	}
	return next, nil
}

// evaluateWithin evaluates the policy, returning at ctx's deadline (the engine sets
// the policy's webhookConfiguration.timeoutSeconds or the request's deadline, whichever
// is nearer) even when a library call does not: the CEL
// function bindings of resource.* and http.* get no context, so they end on their own
// timeout. The evaluation goroutine records into its own invocation and computes a new
// object only; the caller takes both over when it finished in time, so an abandoned
// evaluation never races with the request.
func (m *Mutator) evaluateWithin(ctx context.Context, req *engine.Request, in, old map[string]any, inv *invocation) (map[string]any, error) {
	if _, ok := ctx.Deadline(); !ok {
		// No deadline (offline): nothing to return early for.
		return m.evaluateRecovered(ctx, req, in, old, inv)
	}
	type result struct {
		out map[string]any
		err error
	}
	done := make(chan result, 1)
	own := &invocation{gvr: inv.gvr, gvk: inv.gvk, ctrl: inv.ctrl}
	go func() {
		out, err := m.evaluateRecovered(ctx, req, in, old, own)
		done <- result{out, err}
	}()
	select {
	case r := <-done:
		inv.warnings = append(inv.warnings, own.warnings...)
		inv.notes = append(inv.notes, own.notes...)
		return r.out, r.err
	case <-ctx.Done():
		return nil, fmt.Errorf("evaluation stopped: %w", engine.Stopped(ctx))
	}
}

// evaluateRecovered is evaluate (or its pod-template form) with a panic turned into an
// error: in evaluateWithin's goroutine a panic would end the process, since the
// engine's recover covers only its own goroutine.
func (m *Mutator) evaluateRecovered(ctx context.Context, req *engine.Request, in, old map[string]any, inv *invocation) (out map[string]any, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = nil, fmt.Errorf("panic: %v", r)
		}
	}()
	return m.evaluate(ctx, req, in, old, inv)
}

// evaluate runs the exceptions, params, match conditions and mutations on obj (a Pod for
// autogen templates) and returns the mutated object, or nil when nothing applied.
func (m *Mutator) evaluate(ctx context.Context, req *engine.Request, obj, old map[string]any, inv *invocation) (map[string]any, error) {
	r := resolver{store: m.d.opts.Objects}
	gvk := inv.gvk
	obj = withKind(obj, gvk)
	if old != nil {
		old = withKind(old, gvk)
	}
	attr := attributes(req, obj, r.requestResource(req))
	va := &admission.VersionedAttributes{
		Attributes:         attr,
		VersionedKind:      gvk,
		VersionedObject:    admission.NewLazyObject(&unstructured.Unstructured{Object: obj}),
		VersionedOldObject: admission.NewLazyObject(nil),
	}
	if old != nil {
		va.VersionedOldObject = admission.NewLazyObject(&unstructured.Unstructured{Object: old})
	}
	if m.kprog != nil {
		return m.evaluateKyverno(ctx, req, va, obj, old, inv)
	}
	authz := offlineAuthorizer{}

	params, err := m.collectParams(attr.GetNamespace())
	if err != nil {
		return nil, err
	}
	ns := r.namespaceObject(req, attr)
	oi := objectInterfaces{eq: equivalents{r: r, kind: req.Kind}}
	for _, param := range params {
		cctx := m.prog.compiler.CreateContext(ctx)
		if m.prog.matcher != nil {
			res := m.prog.matcher.Match(cctx, va, param, authz)
			if res.Error != nil {
				return nil, fmt.Errorf("match conditions: %w", res.Error)
			}
			if !res.Matches {
				continue
			}
		}
		m.noteMatched(inv, "conditions")
		var errs []error
		for i, p := range m.prog.patchers {
			if va.VersionedObject.Object() == nil {
				continue
			}
			preq := patch.Request{
				MatchedResource:     inv.gvr,
				VersionedAttributes: va,
				ObjectInterfaces:    oi,
				OptionalVariables:   plugincel.OptionalVariableBindings{VersionedParams: param, Authorizer: authz},
				Namespace:           ns,
			}
			if m.prog.applyConfig[i] {
				tc, err := m.d.types.TypeConverter(gvk)
				if err != nil {
					errs = append(errs, fmt.Errorf("mutations[%d]: %w", i, err))
					continue
				}
				preq.TypeConverter = tc
			}
			next, err := p.Patch(cctx, preq, celconfig.RuntimeCELCostBudget)
			if err != nil {
				errs = append(errs, fmt.Errorf("mutations[%d]: %w", i, err))
				continue
			}
			va.UpdateObject(next)
		}
		if len(errs) > 0 {
			// The API server goes on with the policy's other mutations and then fails
			// the request (Fail) or drops the errors (Ignore): keep the mutations that
			// worked under Ignore, as it does, and fail otherwise.
			if m.failure == admissionv1.Ignore {
				joined := errors.Join(errs...)
				inv.notes = append(inv.notes, engine.Note{Kind: engine.NoteSkipped, Reason: "failurePolicy Ignore", Message: joined.Error()})
				inv.warnings = append(inv.warnings, fmt.Sprintf("%s: mutation skipped (failurePolicy Ignore): %v", m.id, joined))
				continue
			}
			return nil, errors.Join(errs...)
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
	if gvk != req.Kind {
		out = withKind(out, req.Kind)
	}
	return out, nil
}

// withKind returns obj with apiVersion and kind set to gvk (a shallow copy when they
// differ): the patchers need them, and an object matched at an equivalent version of a
// CRD converting with strategy None differs from it only there.
func withKind(obj map[string]any, gvk schema.GroupVersionKind) map[string]any {
	if obj["apiVersion"] == gvk.GroupVersion().String() && obj["kind"] == gvk.Kind {
		return obj
	}
	c := maps.Clone(obj)
	c["apiVersion"] = gvk.GroupVersion().String()
	c["kind"] = gvk.Kind
	return c
}

func objectName(req *engine.Request, obj map[string]any) string {
	name, _ := obj["metadata"].(map[string]any)["name"].(string)
	if ns := metaNamespace(obj); ns != "" {
		name = ns + "/" + name
	}
	return req.Kind.Kind + " " + name
}

// collectParams finds the params of a binding in the context objects, as the API server's
// generic.CollectParams does with its informers: one nil param when the policy takes
// none; by name or by selector, in the binding's namespace, the request's namespace, or
// cluster-wide for cluster-scoped kinds; parameterNotFoundAction Deny fails when none.
func (m *Mutator) collectParams(namespace string) ([]runtime.Object, error) {
	if m.paramKind == nil || m.paramRef == nil {
		return []runtime.Object{nil}, nil
	}
	if m.d.opts.KyvernoCLI {
		return m.kyvernoCLIParams()
	}
	store := m.d.opts.Objects
	gv, err := schema.ParseGroupVersion(m.paramKind.APIVersion)
	if err != nil {
		return nil, fmt.Errorf("paramKind.apiVersion: %w", err)
	}
	ref := m.paramRef
	namespaced := store == nil || store.Namespaced(gv.Group, m.paramKind.Kind)
	ns := ""
	if namespaced {
		ns = namespace
		if ref.Namespace != "" {
			ns = ref.Namespace
		} else if ns == "" {
			return nil, fmt.Errorf("cannot use namespaced paramRef in policy binding that matches cluster-scoped resources")
		}
	} else if ref.Namespace != "" {
		return nil, fmt.Errorf("paramRef.namespace must not be provided for a cluster-scoped `paramKind`")
	}
	var params []runtime.Object
	if store != nil {
		switch {
		case ref.Name != "":
			if obj, ok := store.Get(gv.Group, m.paramKind.Kind, ns, ref.Name); ok {
				params = append(params, &unstructured.Unstructured{Object: obj})
			}
		case ref.Selector != nil:
			sel, err := metav1LabelSelector(ref.Selector)
			if err != nil {
				return nil, err
			}
			for _, obj := range store.List(gv.Group, m.paramKind.Kind, ns) {
				if sel.Matches(labelSet(obj)) {
					params = append(params, &unstructured.Unstructured{Object: obj})
				}
			}
		}
	}
	if len(params) == 0 && ref.ParameterNotFoundAction != nil && *ref.ParameterNotFoundAction == admissionv1.DenyAction {
		return nil, errors.New("no params found for policy binding with `Deny` parameterNotFoundAction")
	}
	return params, nil
}

func metav1LabelSelector(s *metav1.LabelSelector) (labels.Selector, error) {
	sel, err := metav1.LabelSelectorAsSelector(s)
	if err != nil {
		return nil, fmt.Errorf("paramRef.selector: %w", err)
	}
	return sel, nil
}

// labelSet reads an object's labels.
func labelSet(obj map[string]any) labels.Set {
	raw, _ := obj["metadata"].(map[string]any)["labels"].(map[string]any)
	set := make(labels.Set, len(raw))
	for k, v := range raw {
		if s, ok := v.(string); ok {
			set[k] = s
		}
	}
	return set
}
