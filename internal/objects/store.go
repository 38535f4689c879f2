// Package objects holds the objects a policy may read besides the one under mutation:
// Namespaces (for namespaceSelector), CRDs (for schemas), params and any other object
// given with --context offline, or read from the cluster.
package objects

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Key identifies an object.
type Key struct {
	Group, Kind, Namespace, Name string
}

// Store is an in-memory collection of objects, read-only once built. The zero value is
// not usable; call NewStore.
type Store struct {
	objects map[Key]map[string]any
	order   []Key
	// resources maps group/resource (plural, lower case) to kind, from CRDs and the
	// built-in kinds seen.
	resources map[schema.GroupResource]string
}

// NewStore returns an empty store.
func NewStore() *Store {
	return &Store{objects: map[Key]map[string]any{}, resources: map[schema.GroupResource]string{}}
}

func str(m map[string]any, keys ...string) string {
	var cur any = m
	for _, k := range keys {
		mm, ok := cur.(map[string]any)
		if !ok {
			return ""
		}
		cur = mm[k]
	}
	s, _ := cur.(string)
	return s
}

// Add stores obj (a later object with the same key replaces an earlier one).
func (s *Store) Add(obj map[string]any) error {
	apiVersion, kind, name := str(obj, "apiVersion"), str(obj, "kind"), str(obj, "metadata", "name")
	if apiVersion == "" || kind == "" || name == "" {
		return fmt.Errorf("context object needs apiVersion, kind and metadata.name")
	}
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return fmt.Errorf("apiVersion: %w", err)
	}
	k := Key{Group: gv.Group, Kind: kind, Namespace: str(obj, "metadata", "namespace"), Name: name}
	if _, dup := s.objects[k]; !dup {
		s.order = append(s.order, k)
	}
	s.objects[k] = obj
	plural, _ := meta.UnsafeGuessKindToResource(gv.WithKind(kind))
	s.resources[plural.GroupResource()] = kind
	if gv.Group == "apiextensions.k8s.io" && kind == "CustomResourceDefinition" {
		group, plural, ckind := str(obj, "spec", "group"), str(obj, "spec", "names", "plural"), str(obj, "spec", "names", "kind")
		if plural != "" && ckind != "" {
			s.resources[schema.GroupResource{Group: group, Resource: plural}] = ckind
		}
	}
	return nil
}

// Remove deletes the object of the group, kind, namespace and name, as an admitted
// DELETE does; an object the store does not hold is no error.
func (s *Store) Remove(group, kind, namespace, name string) {
	k := Key{group, kind, namespace, name}
	if _, ok := s.objects[k]; !ok {
		return
	}
	delete(s.objects, k)
	s.order = slices.DeleteFunc(s.order, func(o Key) bool { return o == k })
}

// Len is the number of objects.
func (s *Store) Len() int { return len(s.objects) }

// Get returns the object of the group, kind, namespace and name.
func (s *Store) Get(group, kind, namespace, name string) (map[string]any, bool) {
	o, ok := s.objects[Key{group, kind, namespace, name}]
	return o, ok
}

// List returns the objects of a group and kind, in namespace ("" for all namespaces),
// in the order they were added.
func (s *Store) List(group, kind, namespace string) []map[string]any {
	var out []map[string]any
	for _, k := range s.order {
		if k.Group == group && k.Kind == kind && (namespace == "" || k.Namespace == namespace) {
			out = append(out, s.objects[k])
		}
	}
	return out
}

// All returns every object in the order added.
func (s *Store) All() []map[string]any {
	out := make([]map[string]any, 0, len(s.order))
	for _, k := range s.order {
		out = append(out, s.objects[k])
	}
	return out
}

// Namespace returns the Namespace object of that name.
func (s *Store) Namespace(name string) (map[string]any, bool) {
	return s.Get("", "Namespace", "", name)
}

// KindFor maps a group and resource (plural, "pods") to its kind, from the CRDs and
// objects in the store, then from the usual English plural of the built-in kinds.
func (s *Store) KindFor(group, resource string) (string, bool) {
	resource = strings.ToLower(resource)
	if k, ok := s.resources[schema.GroupResource{Group: group, Resource: resource}]; ok {
		return k, true
	}
	for gr, k := range builtinResources {
		if gr.Group == group && gr.Resource == resource {
			return k, true
		}
	}
	return "", false
}

// CRD returns the CustomResourceDefinition that defines group and kind.
func (s *Store) CRD(group, kind string) (map[string]any, bool) {
	for _, crd := range s.List("apiextensions.k8s.io", "CustomResourceDefinition", "") {
		if str(crd, "spec", "group") == group && str(crd, "spec", "names", "kind") == kind {
			return crd, true
		}
	}
	return nil, false
}

// Kinds lists the distinct group/kinds in the store, sorted.
func (s *Store) Kinds() []schema.GroupKind {
	seen := map[schema.GroupKind]bool{}
	var out []schema.GroupKind
	for _, k := range s.order {
		gk := schema.GroupKind{Group: k.Group, Kind: k.Kind}
		if !seen[gk] {
			seen[gk] = true
			out = append(out, gk)
		}
	}
	slices.SortFunc(out, func(a, b schema.GroupKind) int { return strings.Compare(a.String(), b.String()) })
	return out
}

// DefaultNamespace puts the namespaced objects that name no namespace into ns, as the API
// server would have (endpoints/handlers: EnsureObjectNamespaceMatchesRequestNamespace):
// each gets metadata.namespace (on a copy) and is found under ns. Call it once the store
// is built, before it is read; an object already stored under ns with the same name
// stays.
func (s *Store) DefaultNamespace(ns string) {
	if ns == "" {
		return
	}
	for i, k := range s.order {
		if k.Namespace != "" || !s.Namespaced(k.Group, k.Kind) {
			continue
		}
		moved := Key{Group: k.Group, Kind: k.Kind, Namespace: ns, Name: k.Name}
		if _, taken := s.objects[moved]; taken {
			continue
		}
		obj := make(map[string]any, len(s.objects[k]))
		for f, v := range s.objects[k] {
			obj[f] = v
		}
		md, _ := obj["metadata"].(map[string]any)
		nmd := make(map[string]any, len(md)+1)
		for f, v := range md {
			nmd[f] = v
		}
		nmd["namespace"] = ns
		obj["metadata"] = nmd
		delete(s.objects, k)
		s.objects[moved] = obj
		s.order[i] = moved
	}
}
