package cel

import (
	"context"
	"fmt"
	"strings"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured/unstructuredscheme"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/admission/plugin/policy/matching"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	corelisters "k8s.io/client-go/listers/core/v1"

	"github.com/morph-dev/morph/internal/engine"
	"github.com/morph-dev/morph/internal/objects"
)

// criteria adapts a MatchResources to the API server's matching.MatchCriteria.
type criteria struct{ m *admissionv1.MatchResources }

func (c criteria) GetParsedNamespaceSelector() (labels.Selector, error) {
	return metav1.LabelSelectorAsSelector(c.m.NamespaceSelector)
}

func (c criteria) GetParsedObjectSelector() (labels.Selector, error) {
	return metav1.LabelSelectorAsSelector(c.m.ObjectSelector)
}

func (c criteria) GetMatchResources() admissionv1.MatchResources { return *c.m }

// resolver answers the questions the API server's matching asks about kinds, resources and
// namespaces, from the request and the context objects.
type resolver struct {
	store *objects.Store
}

// resourceFor maps a kind to its resource: from a CRD's plural when the store has one, else
// the usual English plural of the kind (as the API server's REST mapper guesses).
func (r resolver) resourceFor(gvk schema.GroupVersionKind) schema.GroupVersionResource {
	if r.store != nil {
		if crd, ok := r.store.CRD(gvk.Group, gvk.Kind); ok {
			if names, _ := crd["spec"].(map[string]any)["names"].(map[string]any); names != nil {
				if plural, _ := names["plural"].(string); plural != "" {
					return gvk.GroupVersion().WithResource(plural)
				}
			}
		}
	}
	plural, _ := meta.UnsafeGuessKindToResource(gvk)
	return plural
}

// kindFor maps a group and resource to its kind; ok is false when nothing knows it.
func (r resolver) kindFor(group, resource string) (string, bool) {
	if r.store != nil {
		return r.store.KindFor(group, resource)
	}
	return objects.NewStore().KindFor(group, resource)
}

// crdVersions lists the versions of a CRD served without conversion (strategy None), in
// which one object can be read at any version by changing only its apiVersion.
func (r resolver) crdVersions(group, kind string) []string {
	if r.store == nil {
		return nil
	}
	crd, ok := r.store.CRD(group, kind)
	if !ok {
		return nil
	}
	spec, _ := crd["spec"].(map[string]any)
	if conv, _ := spec["conversion"].(map[string]any); conv != nil {
		if s, _ := conv["strategy"].(string); s != "" && s != "None" {
			return nil
		}
	}
	var out []string
	versions, _ := spec["versions"].([]any)
	for _, v := range versions {
		vm, _ := v.(map[string]any)
		name, _ := vm["name"].(string)
		if served, ok := vm["served"].(bool); name != "" && (!ok || served) {
			out = append(out, name)
		}
	}
	return out
}

// equivalents implements runtime.EquivalentResourceMapper for matchPolicy Equivalent: the
// other served versions of a custom resource whose CRD converts with strategy None.
type equivalents struct {
	r    resolver
	kind schema.GroupVersionKind
}

func (e equivalents) EquivalentResourcesFor(res schema.GroupVersionResource, _ string) []schema.GroupVersionResource {
	out := []schema.GroupVersionResource{res}
	for _, v := range e.r.crdVersions(e.kind.Group, e.kind.Kind) {
		if v != res.Version {
			out = append(out, schema.GroupVersionResource{Group: res.Group, Version: v, Resource: res.Resource})
		}
	}
	return out
}

func (e equivalents) KindFor(res schema.GroupVersionResource, _ string) schema.GroupVersionKind {
	if res.GroupResource() == e.r.resourceFor(e.kind).GroupResource() {
		return schema.GroupVersionKind{Group: res.Group, Version: res.Version, Kind: e.kind.Kind}
	}
	return schema.GroupVersionKind{}
}

// objectInterfaces is admission.ObjectInterfaces for unstructured objects.
type objectInterfaces struct{ eq equivalents }

func (o objectInterfaces) GetObjectCreater() runtime.ObjectCreater {
	return unstructuredscheme.NewUnstructuredCreator()
}
func (o objectInterfaces) GetObjectTyper() runtime.ObjectTyper {
	return unstructuredscheme.NewUnstructuredObjectTyper()
}
func (o objectInterfaces) GetObjectDefaulter() runtime.ObjectDefaulter { return noDefaults{} }
func (o objectInterfaces) GetObjectConvertor() runtime.ObjectConvertor {
	return runtime.UnsafeObjectConvertor(runtime.NewScheme())
}
func (o objectInterfaces) GetEquivalentResourceMapper() runtime.EquivalentResourceMapper {
	return o.eq
}

type noDefaults struct{}

func (noDefaults) Default(runtime.Object) {}

// namespaces answers the API server's namespace lookups: the request's own Namespace
// object first, then the context objects. An unknown namespace is an error saying what to
// pass, never a (cluster) lookup.
type namespaces struct {
	req   *engine.Request
	store *objects.Store
}

var _ corelisters.NamespaceLister = namespaces{}

func (n namespaces) object(name string) (map[string]any, bool) {
	if n.req.NamespaceObject != nil {
		if nm, _ := n.req.NamespaceObject["metadata"].(map[string]any); nm != nil && nm["name"] == name {
			return n.req.NamespaceObject, true
		}
	}
	if n.store != nil {
		return n.store.Namespace(name)
	}
	return nil, false
}

// Get returns the Namespace, or an error that is deliberately not NotFound (the API
// server would then ask the cluster).
func (n namespaces) Get(name string) (*corev1.Namespace, error) {
	obj, ok := n.object(name)
	if !ok {
		return nil, fmt.Errorf("namespace %q is unknown: pass the Namespace with --context so that namespaceSelector can be evaluated", name)
	}
	var ns corev1.Namespace
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj, &ns); err != nil {
		return nil, fmt.Errorf("namespace %q: %w", name, err)
	}
	return &ns, nil
}

func (n namespaces) List(sel labels.Selector) ([]*corev1.Namespace, error) {
	var out []*corev1.Namespace
	if n.store == nil {
		return nil, nil
	}
	for _, obj := range n.store.List("", "Namespace", "") {
		name, _ := obj["metadata"].(map[string]any)["name"].(string)
		ns, err := n.Get(name)
		if err != nil {
			return nil, err
		}
		if sel.Matches(labels.Set(ns.Labels)) {
			out = append(out, ns)
		}
	}
	return out, nil
}

// attributes builds the API server's admission attributes of a request.
func attributes(req *engine.Request, obj map[string]any, gvr schema.GroupVersionResource) admission.Attributes {
	var newObj, oldObj runtime.Object
	if obj != nil {
		newObj = &unstructured.Unstructured{Object: obj}
	}
	if req.OldObject != nil {
		oldObj = &unstructured.Unstructured{Object: req.OldObject}
	}
	u := &user.DefaultInfo{Name: req.UserInfo.Username, UID: req.UserInfo.UID, Groups: req.UserInfo.Groups, Extra: req.UserInfo.Extra}
	name := req.Name
	if name == "" && obj != nil {
		name, _ = obj["metadata"].(map[string]any)["name"].(string)
	}
	namespace := req.Namespace
	if namespace == "" && obj != nil {
		namespace, _ = obj["metadata"].(map[string]any)["namespace"].(string)
	}
	return admission.NewAttributesRecord(newObj, oldObj, req.Kind, namespace, name, gvr, req.SubResource,
		admission.Operation(req.Operation), nil, req.DryRun, u)
}

// requestResource is the request's resource, derived from its kind when the request does
// not say.
func (r resolver) requestResource(req *engine.Request) schema.GroupVersionResource {
	if req.Resource.Resource != "" {
		return req.Resource
	}
	return r.resourceFor(req.Kind)
}

// matchOne runs the API server's matcher (namespace selector, object selector, excluded
// and included resource rules with matchPolicy) on one MatchResources.
func (r resolver) matchOne(req *engine.Request, attr admission.Attributes, m *admissionv1.MatchResources) (bool, schema.GroupVersionResource, schema.GroupVersionKind, error) {
	matcher := matching.NewMatcher(namespaces{req: req, store: r.store}, nil)
	o := objectInterfaces{eq: equivalents{r: r, kind: req.Kind}}
	ok, gvr, gvk, err := matcher.Matches(attr, o, criteria{m})
	if err != nil {
		return false, gvr, gvk, fmt.Errorf("matching: %w", err)
	}
	return ok, gvr, gvk, nil
}

// namespaceObject returns the request's Namespace for namespaceObject, or nil when the
// object is cluster-scoped or its Namespace is unknown offline.
func (r resolver) namespaceObject(req *engine.Request, attr admission.Attributes) *corev1.Namespace {
	name := attr.GetNamespace()
	if req.Kind.Group == "" && req.Kind.Kind == "Namespace" {
		name = ""
	}
	if name == "" {
		return nil
	}
	ns, err := namespaces{req: req, store: r.store}.Get(name)
	if err != nil {
		return nil
	}
	return ns
}

// offlineAuthorizer answers authorizer checks in CEL offline, where there is no cluster
// to ask: it has no opinion, which CEL's authorizer library reports as not allowed.
type offlineAuthorizer struct{}

func (offlineAuthorizer) Authorize(context.Context, authorizer.Attributes) (authorizer.Decision, string, error) {
	return authorizer.DecisionNoOpinion, "morph has no authorizer offline", nil
}

// targetsOf lists the engine targets of resource rules: each group, version and resource
// mapped to its kind; "*" stays "*". A resource no one knows becomes "*" (the matcher
// then decides on the request's resource).
func (r resolver) targetsOf(rules []admissionv1.NamedRuleWithOperations, equivalent bool) []engine.Target {
	var out []engine.Target
	seen := map[engine.Target]bool{}
	for _, rule := range rules {
		var ops []string
		for _, op := range rule.Operations {
			ops = append(ops, string(op))
		}
		opset, err := engine.OperationsOf(ops...)
		if err != nil {
			continue
		}
		for _, g := range rule.APIGroups {
			for _, v := range rule.APIVersions {
				if equivalent {
					v = "*"
				}
				for _, res := range rule.Resources {
					res, sub, _ := strings.Cut(res, "/")
					kind := "*"
					// A subresource's kind is its own (pods/binding takes a
					// Binding): the API server's matcher decides on resource and
					// subresource, so a subresource rule targets every kind.
					if res != "*" && g != "*" {
						if k, ok := r.kindFor(g, res); ok {
							kind = k
						}
					}
					t := engine.Target{Group: g, Version: v, Kind: kind, Operations: opset}
					if sub != "" {
						// The kind posted to a subresource may be of another group
						// and version too (autoscaling/v1 Scale for apps
						// deployments/scale).
						t = engine.Target{Group: "*", Version: "*", Kind: "*", Operations: opset}
					}
					if !seen[t] {
						seen[t] = true
						out = append(out, t)
					}
				}
			}
		}
	}
	return out
}
