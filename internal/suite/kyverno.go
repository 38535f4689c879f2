package suite

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/morph-dev/morph/internal/engine"
	"github.com/morph-dev/morph/internal/objects"
	"github.com/morph-dev/morph/internal/offline"
	"github.com/morph-dev/morph/internal/policy"
)

// kyvernoTest is a Kyverno CLI test (cli.kyverno.io/v1alpha1 Test, cmd/cli/kubectl-kyverno/
// apis/v1alpha1 of Kyverno 1.19.1), or its older form without apiVersion and kind.
// Unknown fields are errors, as in `kyverno test`.
type kyvernoTest struct {
	APIVersion       string            `json:"apiVersion,omitempty"`
	Kind             string            `json:"kind,omitempty"`
	Metadata         metav1.ObjectMeta `json:"metadata,omitempty"`
	Name             string            `json:"name,omitempty"`
	Policies         []string          `json:"policies,omitempty"`
	Resources        []string          `json:"resources,omitempty"`
	TargetResources  []string          `json:"targetResources,omitempty"`
	Variables        string            `json:"variables,omitempty"`
	Values           *kyvernoValues    `json:"values,omitempty"`
	ParamResources   []string          `json:"paramResources,omitempty"`
	UserInfo         string            `json:"userinfo,omitempty"`
	Results          []kyvernoResult   `json:"results,omitempty"`
	Exceptions       []string          `json:"exceptions,omitempty"`
	Context          string            `json:"context,omitempty"`
	ClusterResources []string          `json:"clusterResources,omitempty"`

	// Payloads of other policy types and mocks morph does not offer: an error when used.
	JSONPayload          string `json:"jsonPayload,omitempty"`
	JSONPayloads         []any  `json:"jsonPayloads,omitempty"`
	HTTPPayloads         []any  `json:"httpPayloads,omitempty"`
	EnvoyPayloads        []any  `json:"envoyPayloads,omitempty"`
	APICallResponses     []any  `json:"apiCallResponses,omitempty"`
	GlobalContextEntries []any  `json:"globalContextEntries,omitempty"`
}

type kyvernoResult struct {
	Policy                      string   `json:"policy"`
	Rule                        string   `json:"rule,omitempty"`
	IsValidatingAdmissionPolicy bool     `json:"isValidatingAdmissionPolicy,omitempty"`
	IsMutatingAdmissionPolicy   bool     `json:"isMutatingAdmissionPolicy,omitempty"`
	IsValidatingPolicy          bool     `json:"isValidatingPolicy,omitempty"`
	IsDeletingPolicy            bool     `json:"isDeletingPolicy,omitempty"`
	IsImageValidatingPolicy     bool     `json:"isImageValidatingPolicy,omitempty"`
	IsGeneratingPolicy          bool     `json:"isGeneratingPolicy,omitempty"`
	IsMutatingPolicy            bool     `json:"isMutatingPolicy,omitempty"`
	Result                      string   `json:"result"`
	Kind                        string   `json:"kind"`
	Operation                   string   `json:"operation,omitempty"`
	PatchedResources            string   `json:"patchedResources,omitempty"`
	GeneratedResource           string   `json:"generatedResource,omitempty"`
	CloneSourceResource         string   `json:"cloneSourceResource,omitempty"`
	FailOnMissingResources      bool     `json:"failOnMissingResources,omitempty"`
	Resources                   []string `json:"resources,omitempty"`
	ResourceSpecs               []struct {
		Group       string `json:"group,omitempty"`
		Version     string `json:"version,omitempty"`
		Kind        string `json:"kind,omitempty"`
		Namespace   string `json:"namespace,omitempty"`
		Subresource string `json:"subresource,omitempty"`
		Name        string `json:"name,omitempty"`
	} `json:"resourceSpecs,omitempty"`
	GeneratedResources []string `json:"generatedResources,omitempty"`
}

// kyvernoValues is a values file's spec (cli.kyverno.io/v1alpha1 Values).
type kyvernoValues struct {
	GlobalValues       map[string]any `json:"globalValues,omitempty"`
	Policies           []any          `json:"policies,omitempty"`
	NamespaceSelectors []struct {
		Name   string            `json:"name"`
		Labels map[string]string `json:"labels"`
	} `json:"namespaceSelector,omitempty"`
	Namespaces   []map[string]any `json:"namespaces,omitempty"`
	Subresources []struct {
		Subresource    metav1.APIResource `json:"subresource"`
		ParentResource metav1.APIResource `json:"parentResource"`
	} `json:"subresources,omitempty"`
}

type kyvernoValuesFile struct {
	metav1.TypeMeta `json:",inline"`
	Metadata        metav1.ObjectMeta `json:"metadata,omitempty"`
	kyvernoValues   `json:",inline"`
}

type kyvernoUserInfoFile struct {
	metav1.TypeMeta `json:",inline"`
	Metadata        metav1.ObjectMeta `json:"metadata,omitempty"`
	Roles           []string          `json:"roles,omitempty"`
	ClusterRoles    []string          `json:"clusterRoles,omitempty"`
	UserInfo        struct {
		Username string              `json:"username,omitempty"`
		UID      string              `json:"uid,omitempty"`
		Groups   []string            `json:"groups,omitempty"`
		Extra    map[string][]string `json:"extra,omitempty"`
	} `json:"userInfo,omitempty"`
	DryRun bool `json:"dryRun,omitempty"`
}

type kyvernoContextFile struct {
	metav1.TypeMeta `json:",inline"`
	Metadata        metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec            struct {
		Resources []map[string]any `json:"resources,omitempty"`
		Images    []any            `json:"images,omitempty"`
	} `json:"spec"`
}

type kyvernoClusterResourceFile struct {
	metav1.TypeMeta `json:",inline"`
	Metadata        metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec            struct {
		CRDs      []string         `json:"crds,omitempty"`
		Resources []map[string]any `json:"resources,omitempty"`
	} `json:"spec"`
}

// strictFile reads a YAML file into v, rejecting unknown fields.
func strictFile(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := yaml.UnmarshalStrict(data, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// runKyvernoFile runs every test document of a kyverno-test.yaml.
func (r *Runner) runKyvernoFile(ctx context.Context, path string) []Case {
	data, err := os.ReadFile(path)
	if err != nil {
		return []Case{fileError(path, "", err)}
	}
	docs, err := policy.Decode(path, data)
	if err != nil {
		return []Case{fileError(path, "", err)}
	}
	var cases []Case
	for _, d := range docs {
		raw, err := json.Marshal(d.Object)
		if err != nil {
			cases = append(cases, fileError(path, "", err))
			continue
		}
		var t kyvernoTest
		if err := yaml.UnmarshalStrict(raw, &t); err != nil {
			cases = append(cases, fileError(path, "", fmt.Errorf("document %d: %w", d.Index, err)))
			continue
		}
		cases = append(cases, r.runKyvernoTest(ctx, path, &t)...)
	}
	return cases
}

// kyvernoRun is one loaded Kyverno test.
type kyvernoRun struct {
	dir   string
	rt    *offline.Runtime
	store *objects.Store
	// unsupported maps the names of the policies morph does not evaluate to their kinds.
	unsupported map[string]string
	// dropsUnmatched names the MutatingPolicies whose non-matching responses the
	// Kyverno CLI drops (processor.hasSelector), by name and namespace/name.
	dropsUnmatched map[string]bool
	loadErr        error
	user           engine.UserInfo
	operation      engine.Operation
	subs           []subresource
	resources      []policy.Document
	targets        []policy.Document
}

type subresource struct {
	kind       schema.GroupVersionKind
	parentKind schema.GroupVersionKind
	parent     schema.GroupVersionResource
	name       string
}

// unsupportedPolicy reports whether a document is a policy of a kind morph does not
// evaluate: Kyverno ClusterPolicies and Policies, Kyverno's CEL policies other than
// mutating ones, ValidatingAdmissionPolicies and their bindings.
func unsupportedPolicy(d policy.Document) bool {
	switch policy.Group(d.APIVersion()) {
	case "kyverno.io":
		return true
	case "policies.kyverno.io":
		return !slices.Contains([]string{"MutatingPolicy", "NamespacedMutatingPolicy", "PolicyException"}, d.Kind())
	case "admissionregistration.k8s.io":
		return strings.HasPrefix(d.Kind(), "Validating")
	}
	return false
}

func (r *Runner) runKyvernoTest(ctx context.Context, path string, t *kyvernoTest) []Case {
	name := t.Metadata.Name
	if name == "" {
		name = t.Name
	}
	fail := func(err error) []Case { return []Case{fileError(path, name, err)} }
	switch {
	case t.JSONPayload != "" || len(t.JSONPayloads) > 0:
		return fail(errors.New("jsonPayloads: morph tests Kubernetes objects only, not JSON payloads"))
	case len(t.HTTPPayloads) > 0 || len(t.EnvoyPayloads) > 0:
		return fail(errors.New("httpPayloads/envoyPayloads: morph does not evaluate authorization policies"))
	case len(t.APICallResponses) > 0:
		return fail(errors.New("apiCallResponses: morph has no HTTP mocks; give the objects policies read as clusterResources"))
	case len(t.GlobalContextEntries) > 0:
		return fail(errors.New("globalContextEntries: give GlobalContextEntry objects as clusterResources instead"))
	case len(t.Results) == 0:
		return fail(errors.New("results: the test checks nothing"))
	}
	run, err := r.loadKyverno(filepath.Dir(path), t)
	if err != nil {
		return fail(err)
	}
	return run.check(ctx, r, path, name, t)
}

// loadKyverno reads everything a test names, relative to its folder, and loads the
// policies with the Kyverno CLI's conventions.
func (r *Runner) loadKyverno(dir string, t *kyvernoTest) (*kyvernoRun, error) {
	run := &kyvernoRun{dir: dir, unsupported: map[string]string{}, dropsUnmatched: map[string]bool{}, operation: engine.Create}
	var ctxDocs []policy.Document
	add := func(paths []string, what string) error {
		docs, err := readDocs(dir, paths)
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		ctxDocs = append(ctxDocs, docs...)
		return nil
	}
	if err := add(t.ParamResources, "paramResources"); err != nil {
		return nil, err
	}
	for _, p := range t.ClusterResources {
		var cr kyvernoClusterResourceFile
		if err := strictFile(resolve(dir, p), &cr); err != nil {
			return nil, fmt.Errorf("clusterResources: %w", err)
		}
		if err := add(cr.Spec.CRDs, "clusterResources "+p+": spec.crds"); err != nil {
			return nil, err
		}
		for i, obj := range cr.Spec.Resources {
			ctxDocs = append(ctxDocs, policy.Document{File: resolve(dir, p), Index: i + 1, Object: normalized(obj)})
		}
	}
	if t.Context != "" {
		file := resolve(dir, t.Context)
		var c kyvernoContextFile
		if err := strictFile(file, &c); err != nil {
			return nil, fmt.Errorf("context: %w", err)
		}
		for i, obj := range c.Spec.Resources {
			ctxDocs = append(ctxDocs, policy.Document{File: file, Index: i + 1, Object: normalized(obj)})
		}
		if len(c.Spec.Images) > 0 {
			// The image data mocks: the Context object itself is context, where the
			// CEL dialect's image library looks for spec.images.
			docs, err := readDocs(dir, []string{t.Context})
			if err != nil {
				return nil, fmt.Errorf("context: %w", err)
			}
			for _, d := range docs {
				if d.Name() == "" {
					md, _ := d.Object["metadata"].(map[string]any)
					if md == nil {
						md = map[string]any{}
						d.Object["metadata"] = md
					}
					md["name"] = "context"
				}
				ctxDocs = append(ctxDocs, d)
			}
		}
	}
	values := t.Values
	if t.Variables != "" && values == nil {
		var vf kyvernoValuesFile
		if err := strictFile(resolve(dir, t.Variables), &vf); err != nil {
			return nil, fmt.Errorf("variables: %w", err)
		}
		values = &vf.kyvernoValues
	}
	if values != nil {
		if len(values.Policies) > 0 {
			return nil, errors.New("variables: policies: per-rule values are for Kyverno ClusterPolicies (JMESPath variables), which morph does not evaluate")
		}
		for _, ns := range values.NamespaceSelectors {
			labels := map[string]any{}
			for k, v := range ns.Labels {
				labels[k] = v
			}
			ctxDocs = append(ctxDocs, policy.Document{File: t.Variables, Object: map[string]any{
				"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": ns.Name, "labels": labels},
			}})
		}
		for _, ns := range values.Namespaces {
			ctxDocs = append(ctxDocs, policy.Document{File: t.Variables, Object: normalized(ns)})
		}
		for k, v := range values.GlobalValues {
			if k != "request.operation" {
				return nil, fmt.Errorf("variables: globalValues.%s: only request.operation means something to CEL policies", k)
			}
			op, err := engine.ParseOperation(fmt.Sprint(v))
			if err != nil {
				return nil, fmt.Errorf("variables: globalValues.request.operation: %w", err)
			}
			run.operation = op
		}
		for _, s := range values.Subresources {
			sub, parent := s.Subresource, s.ParentResource
			parentName, subName, ok := strings.Cut(sub.Name, "/")
			if !ok {
				return nil, fmt.Errorf("variables: subresources: subresource.name %q: use RESOURCE/SUBRESOURCE, as deployments/scale", sub.Name)
			}
			if parent.Name != "" {
				parentName = parent.Name
			}
			run.subs = append(run.subs, subresource{
				kind:       schema.GroupVersionKind{Group: sub.Group, Version: sub.Version, Kind: sub.Kind},
				parentKind: schema.GroupVersionKind{Group: parent.Group, Version: parent.Version, Kind: parent.Kind},
				parent:     schema.GroupVersionResource{Group: parent.Group, Version: parent.Version, Resource: parentName},
				name:       subName,
			})
		}
	}
	if t.UserInfo != "" {
		var u kyvernoUserInfoFile
		if err := strictFile(resolve(dir, t.UserInfo), &u); err != nil {
			return nil, fmt.Errorf("userinfo: %w", err)
		}
		run.user = engine.UserInfo{Username: u.UserInfo.Username, UID: u.UserInfo.UID, Groups: u.UserInfo.Groups, Extra: u.UserInfo.Extra}
	}
	targets, err := readDocs(dir, t.TargetResources)
	if err != nil {
		return nil, fmt.Errorf("targetResources: %w", err)
	}
	// Target resources exist in the cluster: policies may read them.
	ctxDocs = append(ctxDocs, targets...)

	policyDocs, err := readDocs(dir, t.Policies)
	if err != nil {
		return nil, fmt.Errorf("policies: %w", err)
	}
	exceptions, err := readDocs(dir, t.Exceptions)
	if err != nil {
		return nil, fmt.Errorf("exceptions: %w", err)
	}
	var docs []policy.Document
	for _, d := range append(policyDocs, exceptions...) {
		if unsupportedPolicy(d) {
			run.unsupported[d.Name()] = d.Kind()
			continue
		}
		docs = append(docs, d)
		if (d.Kind() == "MutatingPolicy" || d.Kind() == "NamespacedMutatingPolicy") && simpleConstraints(d) {
			run.dropsUnmatched[d.Name()] = true
			if ns := d.Namespace(); ns != "" {
				run.dropsUnmatched[ns+"/"+d.Name()] = true
			}
		}
	}
	newLoader := func(s *objects.Store) *policy.Loader { return r.Hooks.NewLoader(s, true) }
	rt, err := offline.Load(newLoader, ctxDocs, docs, "policies")
	switch {
	case errors.Is(err, policy.ErrNoPolicies):
		// Only policies morph does not evaluate: every result names one of them.
		store := objects.NewStore()
		for _, d := range append(ctxDocs, docs...) {
			if err := store.Add(d.Object); err != nil {
				return nil, fmt.Errorf("%s: %w", d.Where(), err)
			}
		}
		run.store = store
	case err != nil:
		var le *offline.LoadError
		if !errors.As(err, &le) {
			return nil, err
		}
		run.loadErr = err
		run.store = objects.NewStore()
	default:
		run.rt, run.store = rt, rt.Store
	}
	resources, err := readDocs(dir, t.Resources)
	if err != nil {
		return nil, fmt.Errorf("resources: %w", err)
	}
	seen := map[objects.Key]bool{}
	for _, d := range resources {
		run.defaultNamespace(d)
		k := keyOf(d)
		if seen[k] {
			continue // the Kyverno CLI keeps the first of duplicates
		}
		seen[k] = true
		run.resources = append(run.resources, d)
	}
	for _, d := range targets {
		run.defaultNamespace(d)
		run.targets = append(run.targets, d)
	}
	return run, nil
}

// simpleConstraints is the Kyverno CLI's hasSelector (cmd/cli/kubectl-kyverno/processor):
// matchConstraints with one resource rule and no resource names, no exclusions and no
// namespace or object selector.
func simpleConstraints(d policy.Document) bool {
	spec, _ := d.Object["spec"].(map[string]any)
	mc, _ := spec["matchConstraints"].(map[string]any)
	if mc == nil {
		return false
	}
	for _, sel := range []string{"namespaceSelector", "objectSelector"} {
		if s, ok := mc[sel].(map[string]any); ok {
			if l, _ := s["matchLabels"].(map[string]any); len(l) > 0 {
				return false
			}
			if e, _ := s["matchExpressions"].([]any); len(e) > 0 {
				return false
			}
		}
	}
	if ex, _ := mc["excludeResourceRules"].([]any); len(ex) > 0 {
		return false
	}
	rules, _ := mc["resourceRules"].([]any)
	if len(rules) != 1 {
		return false
	}
	rule, _ := rules[0].(map[string]any)
	names, _ := rule["resourceNames"].([]any)
	return len(names) == 0
}

// normalized turns a value decoded by sigs.k8s.io/yaml into the form policy.Decode
// gives (int64 numbers).
func normalized(obj map[string]any) map[string]any {
	engine.Normalize(obj)
	return obj
}

func keyOf(d policy.Document) objects.Key {
	gv, _ := schema.ParseGroupVersion(d.APIVersion())
	return objects.Key{Group: gv.Group, Kind: d.Kind(), Namespace: d.Namespace(), Name: d.Name()}
}

// defaultNamespace puts a namespaced object that names no namespace in "default", as
// the Kyverno CLI's loader does for resources and expected resources alike (a kind it
// does not know is namespaced).
func (run *kyvernoRun) defaultNamespace(d policy.Document) {
	if d.Namespace() != "" || d.Kind() == "" {
		return
	}
	gv, _ := schema.ParseGroupVersion(d.APIVersion())
	if !run.store.Namespaced(gv.Group, d.Kind()) {
		return
	}
	md, ok := d.Object["metadata"].(map[string]any)
	if !ok {
		md = map[string]any{}
		d.Object["metadata"] = md
	}
	md["namespace"] = "default"
}

// evaluation is the outcome of one resource under one operation.
type evaluation struct {
	doc       policy.Document
	after     map[string]any
	res       *engine.Result
	err       error
	decisions Decisions
}

func (run *kyvernoRun) evaluate(ctx context.Context, r *Runner, d policy.Document, op engine.Operation, existing bool) evaluation {
	ev := evaluation{doc: d, after: d.Object}
	if run.rt == nil {
		return ev
	}
	req, err := offline.NewRequest(run.store, d, offline.RequestOptions{Operation: op, Namespace: "default", UserInfo: run.user})
	if err != nil {
		ev.err = err
		return ev
	}
	if op == engine.Update && req.OldObject == nil {
		req.OldObject = d.Object
	}
	for _, s := range run.subs {
		if s.kind == req.Kind {
			// A request for the parent's subresource, as the Kyverno CLI makes it: the
			// parent's kind and resource, the subresource's name.
			req.Kind, req.Resource, req.SubResource = s.parentKind, s.parent, s.name
		}
	}
	if existing {
		// A target: mutated by the policies that mutate existing objects, as an update
		// of itself.
		req.Operation, req.OldObject, req.Background = engine.Update, req.Object, true
	}
	ev.res, ev.err = run.rt.Set.Mutate(ctx, req)
	ev.decisions = decisionsOf(ev.res)
	if ev.res != nil {
		ev.after = ev.res.Object
	}
	return ev
}

// status is what the Kyverno CLI would report for one policy on one evaluation.
type status string

const (
	statusPass     status = "pass"
	statusSkip     status = "skip"
	statusError    status = "error"
	statusExcluded status = "excluded" // the policy did not match: a pass whatever was expected
	statusNotFound status = "not found"
)

func (ev evaluation) status(ids []engine.ID) (status, string) {
	if ev.err != nil {
		return statusError, ev.err.Error()
	}
	best := statusExcluded
	for _, id := range ids {
		for _, f := range ev.res.Failures {
			if f.ID == id {
				return statusError, f.Err.Error()
			}
		}
		if ev.decisions.Exempted[id] {
			best = statusSkip
			continue
		}
		if slices.Contains(ev.res.Mutated(), id) {
			return statusPass, ""
		}
		if ev.decisions.Tracked != nil && ev.decisions.Tracked(id) && ev.decisions.Matched[id] {
			if ev.decisions.ConditionsMet[id] {
				return statusPass, ""
			}
			best = statusSkip
		}
	}
	return best, ""
}

func (run *kyvernoRun) policyIDs(name string) []engine.ID {
	if run.rt == nil {
		return nil
	}
	ns, n, ok := strings.Cut(name, "/")
	if !ok {
		ns, n = "", name
	}
	var ids []engine.ID
	for _, m := range run.rt.Set.Mutators() {
		id := m.ID
		if id.Name == n && (!ok || id.Namespace == ns) {
			ids = append(ids, id)
		}
	}
	return ids
}

// selected reports whether the result names the document (by name, or namespace/name,
// or resourceSpecs), or names none.
func selected(res *kyvernoResult, d policy.Document) bool {
	if len(res.Resources) == 0 && len(res.ResourceSpecs) == 0 {
		return true
	}
	for _, r := range res.Resources {
		if ns, n, ok := strings.Cut(r, "/"); ok {
			if ns == d.Namespace() && n == d.Name() {
				return true
			}
		} else if r == d.Name() {
			return true
		}
	}
	for _, s := range res.ResourceSpecs {
		gv := s.Version
		if s.Group != "" {
			gv = s.Group + "/" + s.Version
		}
		if gv == d.APIVersion() && s.Namespace == d.Namespace() && s.Name == d.Name() {
			return true
		}
	}
	return false
}

func (run *kyvernoRun) check(ctx context.Context, r *Runner, path, test string, t *kyvernoTest) []Case {
	if run.loadErr != nil {
		// Nothing was evaluated: one failure per result, with the load errors.
		var cases []Case
		for _, res := range t.Results {
			cases = append(cases, Case{File: path, Test: test, Name: fmt.Sprintf("%s %s: %s", res.Policy, strings.Join(res.Resources, ","), res.Result),
				Message: "policies could not be loaded:\n" + loadErrorText(run.loadErr)})
		}
		return cases
	}
	evals := map[engine.Operation][]evaluation{}
	evalsFor := func(op engine.Operation) []evaluation {
		if e, ok := evals[op]; ok {
			return e
		}
		var out []evaluation
		for _, d := range run.resources {
			out = append(out, run.evaluate(ctx, r, d, op, false))
		}
		evals[op] = out
		return out
	}
	// Targets are checked once mutated, as the Kyverno CLI keeps only the responses
	// that patched a target.
	var targetEvals []evaluation
	for _, d := range run.targets {
		if ev := run.evaluate(ctx, r, d, engine.Update, true); ev.err != nil || (ev.res != nil && ev.res.Changed()) {
			targetEvals = append(targetEvals, ev)
		}
	}
	var cases []Case
	for i := range t.Results {
		res := &t.Results[i]
		op := run.operation
		if res.Operation != "" {
			var err error
			if op, err = engine.ParseOperation(res.Operation); err != nil {
				cases = append(cases, Case{File: path, Test: test, Name: res.Policy, Message: "results[" + fmt.Sprint(i) + "].operation: " + err.Error()})
				continue
			}
		}
		var rows []Case
		for _, ev := range evalsFor(op) {
			if selected(res, ev.doc) {
				if c, ok := run.checkOne(path, test, res, ev); ok {
					rows = append(rows, c)
				}
			}
		}
		for _, ev := range targetEvals {
			if selected(res, ev.doc) {
				if c, ok := run.checkOne(path, test, res, ev); ok {
					rows = append(rows, c)
				}
			}
		}
		if len(rows) == 0 && len(res.Resources)+len(res.ResourceSpecs) > 0 {
			rows = append(rows, Case{File: path, Test: test, Name: fmt.Sprintf("%s %s", res.Policy, strings.Join(res.Resources, ",")),
				Message: "no resource of the test matches the result's resources"})
		}
		cases = append(cases, rows...)
	}
	return cases
}

// checkOne checks one result against one evaluated resource. It reports false when the
// Kyverno CLI would show no row: the expected patchedResources file has no object of
// that name and failOnMissingResources is off.
func (run *kyvernoRun) checkOne(path, test string, res *kyvernoResult, ev evaluation) (Case, bool) {
	c := Case{File: path, Test: test, Name: fmt.Sprintf("%s %s: %s", res.Policy, describe(ev.doc), res.Result)}
	if res.Operation != "" {
		c.Name += " on " + strings.ToUpper(res.Operation)
	}
	failf := func(format string, args ...any) (Case, bool) {
		c.Message = fmt.Sprintf(format, args...)
		return c, true
	}
	polName := res.Policy
	if _, n, ok := strings.Cut(polName, "/"); ok {
		polName = n
	}
	ids := run.policyIDs(res.Policy)
	if len(ids) == 0 {
		if kind, ok := run.unsupported[polName]; ok {
			return failf("%s %q: morph evaluates mutation policies only (MutatingPolicy, MutatingAdmissionPolicy)", kind, polName)
		}
		return failf("no policy %q is loaded", res.Policy)
	}
	st, msg := ev.status(ids)
	if st == statusExcluded && (ids[0].Kind == "MutatingAdmissionPolicy" || run.dropsUnmatched[res.Policy]) {
		// The Kyverno CLI keeps no response for a MutatingAdmissionPolicy that does not
		// match, nor for a MutatingPolicy with a single resource rule and no selector,
		// exclusion or resource names; a result that names it is "Not found".
		st, msg = statusNotFound, "the policy does not match the resource (the Kyverno CLI reports such a result as not found)"
	}
	if st == statusExcluded {
		c.Passed = true
		c.Message = "excluded: the policy does not match the resource"
		return c, true
	}
	if st == statusNotFound {
		return failf("%s", msg)
	}
	if res.PatchedResources != "" {
		expected, err := readDocs(run.dir, []string{res.PatchedResources})
		if err != nil {
			return failf("patchedResources: %v", err)
		}
		var want map[string]any
		actual := policy.Document{Object: ev.after}
		for _, d := range expected {
			run.defaultNamespace(d)
			if d.APIVersion() == actual.APIVersion() && d.Kind() == actual.Kind() && d.Name() == actual.Name() && d.Namespace() == actual.Namespace() {
				want = d.Object
				break
			}
		}
		if want == nil {
			if !res.FailOnMissingResources {
				return Case{}, false
			}
			return failf("patchedResources %s: no %s", res.PatchedResources, describe(actual))
		}
		equal, err := equalKyverno(ev.after, want)
		if err != nil {
			return failf("comparing with patchedResources: %v", err)
		}
		if !equal {
			c.Diff = diff(tidyObject(want), tidyObject(ev.after))
			return failf("the patched resource differs from %s", res.PatchedResources)
		}
	}
	if string(st) != res.Result {
		if msg != "" {
			return failf("want %s, got %s: %s", res.Result, st, msg)
		}
		return failf("want %s, got %s", res.Result, st)
	}
	c.Passed = true
	return c, true
}
