// Package offline builds what the offline surfaces (morph apply, morph test) need to run
// the engine without a cluster: the policies and context objects loaded into a Set and
// a Store, and one engine.Request per input document. It knows no dialect: the caller
// passes the loader that does.
package offline

import (
	"context"
	"errors"
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/morph-dev/morph/internal/engine"
	"github.com/morph-dev/morph/internal/objects"
	"github.com/morph-dev/morph/internal/policy"
	"github.com/morph-dev/morph/internal/request"
)

// Runtime is a loaded set of policies with the context objects they read.
type Runtime struct {
	Store      *objects.Store
	Set        *engine.Set
	Validators *engine.Validators
	// Warnings are the loaders' warnings, each naming its policy.
	Warnings []string
}

// Policies is what request.Evaluate runs.
func (rt *Runtime) Policies() request.Policies {
	return request.Policies{Set: rt.Set, Validators: rt.Validators}
}

// LoadError is a failed load: Errs are the located errors of every rejected policy, one
// per line for users; Warnings are the loaders' warnings.
type LoadError struct {
	Errs     []error
	Warnings []string
}

func (e *LoadError) Error() string { return errors.Join(e.Errs...).Error() }

// Load adds the context documents to a new store, then routes the policy documents:
// those no dialect handles (CRDs, params, Namespaces) are context too, added before
// compiling so that policies can use them. An error from compiling is a *LoadError;
// others are returned as they are. policyNames names the policy paths in the error
// when they hold no policy.
func Load(newLoader func(*objects.Store) *policy.Loader, contextDocs, docs []policy.Document, policyNames string) (*Runtime, error) {
	store := objects.NewStore()
	for _, d := range contextDocs {
		if err := store.Add(d.Object); err != nil {
			return nil, fmt.Errorf("%s: %w", d.Where(), err)
		}
	}
	loader := newLoader(store)
	var policyDocs []policy.Document
	for _, d := range docs {
		if loader.Known(d) {
			policyDocs = append(policyDocs, d)
			continue
		}
		if err := store.Add(d.Object); err != nil {
			return nil, fmt.Errorf("%s: %w", d.Where(), err)
		}
	}
	if len(policyDocs) == 0 {
		return nil, fmt.Errorf("%s: %w", policyNames, policy.ErrNoPolicies)
	}
	bundle, _, err := loader.Load(policyDocs)
	if err != nil {
		return nil, &LoadError{Errs: policy.Errors(err), Warnings: bundle.Warnings}
	}
	set, err := engine.NewSet(bundle.Mutators, bundle.Finalizers...)
	if err != nil {
		return nil, err
	}
	return &Runtime{Store: store, Set: set, Validators: engine.NewValidators(bundle.Validators), Warnings: bundle.Warnings}, nil
}

// Evaluate mutates and validates one object in the order the mode asks for (see
// request.Evaluate): at admission (reconcile false) mutate then validate; at reconcile
// validate first, except for the policies that ask for mutation first.
func (rt *Runtime) Evaluate(ctx context.Context, req *engine.Request, reconcile bool) (*engine.Result, []engine.Violation, error) {
	mode := request.Admission
	if reconcile {
		mode = request.Reconcile
	}
	ev, err := request.Evaluate(ctx, rt.Policies(), req, mode)
	if err != nil {
		return nil, nil, err
	}
	return ev.Result, ev.Violations, nil
}

// RequestOptions are the parts of a request that do not come from the object.
type RequestOptions struct {
	Operation engine.Operation
	// Namespace is the namespace of a namespaced object that names none.
	Namespace string
	// Source is Gatekeeper's match.source; All is taken as Original.
	Source engine.Source
	// Olds are the stored objects, matched to the object by apiVersion, kind,
	// namespace and name.
	Olds     []policy.Document
	UserInfo engine.UserInfo
}

// NewRequest builds the admission request for one document: its kind, its namespace
// (opts.Namespace when it names none and its kind is namespaced), its Namespace object
// (from the store, or one carrying only the kubernetes.io/metadata.name label the API
// server sets), its old object (for DELETE the object itself when none is given).
func NewRequest(store *objects.Store, d policy.Document, opts RequestOptions) (*engine.Request, error) {
	gv, err := schema.ParseGroupVersion(d.APIVersion())
	if err != nil || d.Kind() == "" {
		return nil, fmt.Errorf("not a Kubernetes object: apiVersion and kind are required")
	}
	gvk := gv.WithKind(d.Kind())
	obj := d.Object
	ns := d.Namespace()
	if ns == "" && store.Namespaced(gvk.Group, gvk.Kind) {
		ns = opts.Namespace
	}
	op := opts.Operation
	req := &engine.Request{
		UID:       "", // offline requests carry no uid
		Kind:      gvk,
		Operation: op,
		Namespace: ns,
		Name:      d.Name(),
		Object:    obj,
		UserInfo:  opts.UserInfo,
		Source:    opts.Source,
	}
	if req.Source == engine.SourceAll || req.Source == "" {
		req.Source = engine.SourceOriginal
	}
	for _, old := range opts.Olds {
		if old.APIVersion() == d.APIVersion() && old.Kind() == d.Kind() && old.Name() == d.Name() &&
			(old.Namespace() == d.Namespace() || old.Namespace() == ns) {
			req.OldObject = old.Object
			break
		}
	}
	if (op == engine.Update || op == engine.Delete) && req.OldObject == nil && len(opts.Olds) > 0 {
		return nil, fmt.Errorf("no object in --old matches %s %s/%s", d.Kind(), ns, d.Name())
	}
	if op == engine.Delete && req.OldObject == nil {
		req.OldObject = obj
	}
	// Offline, a Namespace not given as context is taken to be as the API server
	// creates it.
	req.NamespaceObject = request.NamespaceObject(store, gvk, ns, req.Object, req.OldObject, request.AssumeCreated)
	return req, nil
}

// ReadUserInfo reads the requesting user (username, uid, groups, extra) from a YAML or
// JSON file; "" is the anonymous zero user.
func ReadUserInfo(path string) (engine.UserInfo, error) {
	var u engine.UserInfo
	if path == "" {
		return u, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return u, fmt.Errorf("--userinfo: %w", err)
	}
	if err := yaml.UnmarshalStrict(data, &u); err != nil {
		return u, fmt.Errorf("--userinfo %s: expected username, uid, groups and extra: %w", path, err)
	}
	return u, nil
}

// StoreObjects reads the objects that exist offline (the --existing and --context
// objects, and the triggers admitted so far) from a store, as the cluster controller
// reads them from the API server: request.Objects.
type StoreObjects struct{ Store *objects.Store }

var _ request.Objects = StoreObjects{}

func (s StoreObjects) kind(gvr schema.GroupVersionResource) (string, error) {
	kind, ok := s.Store.KindFor(gvr.Group, gvr.Resource)
	if !ok {
		return "", fmt.Errorf("resource %s is unknown: pass its CustomResourceDefinition with --context", gvr.GroupResource())
	}
	return kind, nil
}

// List implements request.Objects. The store keeps one version of each object; it
// answers for any version of its resource.
func (s StoreObjects) List(_ context.Context, gvr schema.GroupVersionResource, namespace string) ([]map[string]any, error) {
	kind, err := s.kind(gvr)
	if err != nil {
		return nil, err
	}
	return s.Store.List(gvr.Group, kind, namespace), nil
}

// Get implements request.Objects.
func (s StoreObjects) Get(_ context.Context, gvr schema.GroupVersionResource, namespace, name string) (map[string]any, error) {
	kind, err := s.kind(gvr)
	if err != nil {
		return nil, err
	}
	obj, _ := s.Store.Get(gvr.Group, kind, namespace, name)
	return obj, nil
}

// Done is one background work item run offline: its result (nil when the target no
// longer exists) or its error.
type Done struct {
	Work   request.Work
	Result *engine.Result
	Err    error
}

// RunBackground runs background work in order, as the cluster controller does one item
// after the other: each reads its target from the store as it is now, evaluates the
// work's policy on it (request.Background) and, when that changed something, writes the
// result back to the store, where the next items (and resource.get/list) see it.
func (rt *Runtime) RunBackground(ctx context.Context, work []request.Work) []Done {
	objs := StoreObjects{Store: rt.Store}
	out := make([]Done, 0, len(work))
	for _, w := range work {
		d := Done{Work: w}
		target, err := objs.Get(ctx, w.Target.Resource, w.Target.Namespace, w.Target.Name)
		if err == nil {
			d.Result, err = request.Background(ctx, rt.Policies(), w, target)
		}
		if err == nil && d.Result != nil && d.Result.Changed() {
			err = rt.Store.Add(d.Result.Object)
		}
		d.Err = err
		out = append(out, d)
	}
	return out
}
