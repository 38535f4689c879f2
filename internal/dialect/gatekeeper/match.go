package gatekeeper

import (
	"fmt"
	"regexp"
	"slices"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/morph-dev/morph/internal/engine"
	"github.com/morph-dev/morph/internal/match"
	"github.com/morph-dev/morph/internal/objects"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// wildcardPattern is the schema of Gatekeeper's wildcard strings (match.namespaces,
// excludedNamespaces and name) in its CRDs (pkg/wildcard/wildcard.go, the
// +kubebuilder:validation:Pattern of Wildcard): the API server refuses any other value.
var wildcardPattern = regexp.MustCompile(`^\*?[-:a-z0-9]*\*?$`)

// kindSelector is one entry of match.kinds. Empty lists and "*" match everything.
type kindSelector struct {
	groups, kinds []string
	anyGroup      bool
	anyKind       bool
}

func (k kindSelector) matches(group, kind string) bool {
	return (k.anyGroup || slices.Contains(k.groups, group)) && (k.anyKind || slices.Contains(k.kinds, kind))
}

// matcher is a compiled spec.match. Every criterion is compiled at load; evaluating it
// allocates nothing.
//
// Semantics follow Gatekeeper:
//   - the namespace of an object is metadata.namespace, else the request's namespace; a
//     Namespace is matched by namespaces, excludedNamespaces and namespaceSelector as if it
//     lived in itself;
//   - other cluster-scoped objects are not restricted by namespaces, excludedNamespaces or
//     namespaceSelector;
//   - name matches metadata.name, or metadata.generateName when the name is empty;
//   - an empty request source means Original.
type matcher struct {
	scope       string // "", "Namespaced" or "Cluster"
	kinds       []kindSelector
	labels      *match.Selector
	nsSelector  *match.Selector
	namespaces  match.Globs
	excluded    match.Globs
	name        match.Glob
	hasName     bool
	source      engine.Source
	store       *objects.Store
	kindsGlobal bool // kinds absent, or some entry matching every group and kind
}

// needs lists what matching reads from the cluster (engine.Descriptor.Needs): the
// Namespace of the object for namespaceSelector, and the CRD of a custom kind whose
// scope decides the scope and namespace criteria (an object without a namespace is
// cluster-scoped or not by its CRD).
func (m *matcher) needs(targets []engine.Target) []schema.GroupVersionResource {
	if m == nil {
		return nil
	}
	var out []schema.GroupVersionResource
	if m.nsSelector != nil {
		out = append(out, objects.NamespaceResource)
	}
	if m.scope != "" || len(m.namespaces) > 0 || len(m.excluded) > 0 || m.nsSelector != nil {
		for _, t := range targets {
			if t.Group == "*" || t.Kind == "*" || !objects.BuiltinKind(t.Group, t.Kind) {
				out = append(out, objects.CRDResource)
				break
			}
		}
	}
	return out
}

func parseMatch(f fields, v any, store *objects.Store) (*matcher, error) {
	at := field.NewPath("spec", "match")
	m := &matcher{source: engine.SourceAll, store: store, kindsGlobal: true}
	spec, err := f.object(v, at)
	if err != nil || spec == nil {
		return m, err
	}
	if err := f.known(spec, at, "scope", "kinds", "labelSelector", "namespaces", "excludedNamespaces", "namespaceSelector", "name", "source"); err != nil {
		return nil, err
	}
	if m.scope, err = f.str(spec["scope"], at.Child("scope")); err != nil {
		return nil, err
	}
	switch m.scope {
	case "", "*":
		m.scope = ""
	case "Namespaced", "Cluster":
	default:
		return nil, f.fail(field.NotSupported(at.Child("scope"), m.scope, []string{"Namespaced", "Cluster", "*"}))
	}
	kinds, err := f.list(spec["kinds"], at.Child("kinds"))
	if err != nil {
		return nil, err
	}
	if len(kinds) > 0 {
		m.kindsGlobal = false
	}
	for i, e := range kinds {
		kf := at.Child("kinds").Index(i)
		em, err := f.object(e, kf)
		if err != nil {
			return nil, err
		}
		if err := f.known(em, kf, "apiGroups", "kinds"); err != nil {
			return nil, err
		}
		var ks kindSelector
		if ks.groups, err = f.strings(em["apiGroups"], kf.Child("apiGroups")); err != nil {
			return nil, err
		}
		if ks.kinds, err = f.strings(em["kinds"], kf.Child("kinds")); err != nil {
			return nil, err
		}
		ks.anyGroup = len(ks.groups) == 0 || slices.Contains(ks.groups, "*")
		ks.anyKind = len(ks.kinds) == 0 || slices.Contains(ks.kinds, "*")
		if ks.anyGroup && ks.anyKind {
			m.kindsGlobal = true
		}
		m.kinds = append(m.kinds, ks)
	}
	if m.labels, err = selector(f, spec["labelSelector"], at.Child("labelSelector")); err != nil {
		return nil, err
	}
	if m.nsSelector, err = selector(f, spec["namespaceSelector"], at.Child("namespaceSelector")); err != nil {
		return nil, err
	}
	for _, g := range []struct {
		key string
		out *match.Globs
	}{{"namespaces", &m.namespaces}, {"excludedNamespaces", &m.excluded}} {
		ss, err := f.strings(spec[g.key], at.Child(g.key))
		if err != nil {
			return nil, err
		}
		for i, s := range ss {
			if !wildcardPattern.MatchString(s) {
				return nil, f.fail(badWildcard(at.Child(g.key).Index(i), s))
			}
		}
		if *g.out, err = match.NewGlobs(ss); err != nil {
			return nil, f.doc.Wrap(at.Child(g.key), nil, err)
		}
	}
	name, err := f.str(spec["name"], at.Child("name"))
	if err != nil {
		return nil, err
	}
	if name != "" {
		if !wildcardPattern.MatchString(name) {
			return nil, f.fail(badWildcard(at.Child("name"), name))
		}
		if m.name, err = match.NewGlob(name); err != nil {
			return nil, f.doc.Wrap(at.Child("name"), name, err)
		}
		m.hasName = true
	}
	src, err := f.str(spec["source"], at.Child("source"))
	if err != nil {
		return nil, err
	}
	switch engine.Source(src) {
	case "", engine.SourceAll:
	case engine.SourceOriginal, engine.SourceGenerated:
		m.source = engine.Source(src)
	default:
		return nil, f.fail(field.NotSupported(at.Child("source"), src, []engine.Source{engine.SourceAll, engine.SourceOriginal, engine.SourceGenerated}))
	}
	return m, nil
}

// badWildcard is the error for a namespace or name that Gatekeeper's CRD refuses.
func badWildcard(at *field.Path, s string) *field.Error {
	return field.Invalid(at, s, fmt.Sprintf("should match '%s' (lower-case letters, digits, - and :, with an optional * at either end), as Gatekeeper's CRD requires", wildcardPattern))
}

// selector compiles a label selector; an empty list (as in the schematic example of the
// Gatekeeper documentation, "labelSelector: []") is read as no selector.
func selector(f fields, v any, at *field.Path) (*match.Selector, error) {
	if l, ok := v.([]any); ok && len(l) == 0 {
		return nil, nil
	}
	s, err := match.NewSelector(v)
	if err != nil {
		return nil, f.doc.Wrap(at, nil, err)
	}
	return s, nil
}

// matches evaluates the criteria on the current object.
func (m *matcher) matches(req *engine.Request, obj map[string]any) (bool, error) {
	if m.source != engine.SourceAll {
		src := req.Source
		if src == "" {
			src = engine.SourceOriginal
		}
		if src != m.source && src != engine.SourceAll {
			return false, nil
		}
	}
	group, kind := req.Kind.Group, req.Kind.Kind
	if !m.kindsGlobal {
		ok := false
		for _, k := range m.kinds {
			if k.matches(group, kind) {
				ok = true
				break
			}
		}
		if !ok {
			return false, nil
		}
	}
	meta := match.Metadata(obj)
	if m.hasName {
		name, _ := meta["name"].(string)
		if name == "" {
			name, _ = meta["generateName"].(string)
		}
		if !m.name.Match(name) {
			return false, nil
		}
	}
	if m.labels != nil {
		lbls, _ := meta["labels"].(map[string]any)
		if !m.labels.Matches(lbls) {
			return false, nil
		}
	}
	isNamespace := group == "" && kind == "Namespace"
	ns, _ := meta["namespace"].(string)
	if ns == "" {
		ns = req.Namespace
	}
	namespaced := ns != "" || (!isNamespace && m.store.Namespaced(group, kind))
	switch m.scope {
	case "Namespaced":
		if !namespaced {
			return false, nil
		}
	case "Cluster":
		if namespaced {
			return false, nil
		}
	}
	if !namespaced && !isNamespace {
		return true, nil // cluster-scoped: the namespace criteria do not apply
	}
	if isNamespace {
		ns, _ = meta["name"].(string)
	}
	if len(m.namespaces) > 0 && !m.namespaces.Any(ns) {
		return false, nil
	}
	if len(m.excluded) > 0 && m.excluded.Any(ns) {
		return false, nil
	}
	if m.nsSelector != nil {
		nsObj := req.NamespaceObject
		if isNamespace {
			nsObj = obj
		}
		if nsObj == nil && m.store != nil {
			nsObj, _ = m.store.Namespace(ns)
		}
		if nsObj == nil {
			return false, fmt.Errorf("namespaceSelector needs the Namespace %q, which the request does not carry: give it as a context object (--context)", ns)
		}
		if !m.nsSelector.Matches(match.Labels(nsObj)) {
			return false, nil
		}
	}
	return true, nil
}
