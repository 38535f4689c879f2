package engine

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// compiled is a mutator with its place in the total order and its cached properties.
type compiled struct {
	Mutator
	rank int
}

type indexKey struct {
	gvk schema.GroupVersionKind
	op  Operation
}

// Set is an immutable, indexed and ordered collection of mutators. It is safe for
// concurrent use.
type Set struct {
	all        []*compiled
	exact      map[schema.GroupVersionKind][]*compiled // mutators with an exact target for the GVK
	wildcard   []*compiled                             // mutators with any target holding "*"
	finalizers []Finalizer
	cache      sync.Map // indexKey -> *candidateList
	cached     atomic.Int64
	// writers recycles the Writers of finished requests (see writer).
	writers sync.Pool
}

// maxCachedKeys bounds the candidate cache, so that requests naming made-up kinds cannot
// grow it without end.
const maxCachedKeys = 4096

// NewSet orders and indexes mutators. Two mutators with the same ID are an error.
func NewSet(mutators []Mutator, finalizers ...Finalizer) (*Set, error) {
	for _, f := range finalizers {
		if f.Finalize == nil {
			return nil, fmt.Errorf("finalizer %q has no finalize function", f.Name)
		}
	}
	s := &Set{exact: make(map[schema.GroupVersionKind][]*compiled), finalizers: finalizers}
	for i, m := range mutators {
		if m.Mutate == nil {
			return nil, fmt.Errorf("policy %s (mutator %d) has no mutate function", m.ID, i)
		}
		s.all = append(s.all, &compiled{Mutator: m})
	}
	slices.SortStableFunc(s.all, func(a, b *compiled) int { return a.ID.Compare(b.ID) })
	for i, c := range s.all {
		c.rank = i
		if i > 0 && s.all[i-1].ID == c.ID {
			return nil, fmt.Errorf("two policies are both named %s: names must be unique", c.ID)
		}
		wild := false
		for _, t := range c.Targets {
			if !t.exact() {
				wild = true
				continue
			}
			gvk := schema.GroupVersionKind{Group: t.Group, Version: t.Version, Kind: t.Kind}
			if l := s.exact[gvk]; len(l) == 0 || l[len(l)-1] != c {
				s.exact[gvk] = append(l, c)
			}
		}
		if wild {
			s.wildcard = append(s.wildcard, c)
		}
	}
	return s, nil
}

// Mutators returns the mutators in order.
func (s *Set) Mutators() []Mutator {
	out := make([]Mutator, len(s.all))
	for i, c := range s.all {
		out[i] = c.Mutator
	}
	return out
}

// candidateList is what the candidate cache holds for a kind and operation.
type candidateList struct {
	// all are the mutators with a target naming the kind and operation, in order.
	all []*compiled
	// admission are those of all that run at admission (see Applies): an admission
	// request, the hot path, filters nothing.
	admission []*compiled
}

// candidates returns, in order, the mutators with a target naming gvk and op.
func (s *Set) candidates(gvk schema.GroupVersionKind, op Operation) []*compiled {
	return s.lookup(gvk, op).all
}

// lookup returns the cached candidateList of gvk and op, building it on a miss.
func (s *Set) lookup(gvk schema.GroupVersionKind, op Operation) *candidateList {
	key := indexKey{gvk, op}
	if v, ok := s.cache.Load(key); ok {
		return v.(*candidateList)
	}
	var out []*compiled
	add := func(c *compiled) {
		for _, t := range c.Targets {
			if t.matches(gvk, op) {
				out = append(out, c)
				return
			}
		}
	}
	exact := s.exact[gvk]
	i, j := 0, 0
	for i < len(exact) || j < len(s.wildcard) {
		switch {
		case j == len(s.wildcard) || (i < len(exact) && exact[i].rank < s.wildcard[j].rank):
			add(exact[i])
			i++
		case i == len(exact) || s.wildcard[j].rank < exact[i].rank:
			add(s.wildcard[j])
			j++
		default: // the same mutator in both lists
			add(exact[i])
			i++
			j++
		}
	}
	// A zero Request is an admission request.
	list := &candidateList{all: out, admission: applicable(out, &Request{})}
	if s.cached.Load() < maxCachedKeys {
		// The key outlives the request, whose strings may point into its body (the
		// webhook's decoder does not copy them): clone them, or each cached key pins a
		// whole request body (60 reviews of made-up kinds kept 263 MB live).
		key.gvk = schema.GroupVersionKind{Group: strings.Clone(gvk.Group), Version: strings.Clone(gvk.Version), Kind: strings.Clone(gvk.Kind)}
		if _, loaded := s.cache.LoadOrStore(key, list); !loaded {
			s.cached.Add(1)
		}
	}
	return list
}

// FailClose reports whether any policy that would run on req fails closed: a request
// whose mutation could not finish is then refused.
func (s *Set) FailClose(req *Request) bool {
	for _, c := range s.candidates(req.Kind, req.Operation) {
		if c.FailurePolicy == FailClose && Applies(&c.Descriptor, req) {
			return true
		}
	}
	return false
}

// Candidates lists, in order, the IDs of the mutators whose targets name gvk and op.
func (s *Set) Candidates(gvk schema.GroupVersionKind, op Operation) []ID {
	cs := s.candidates(gvk, op)
	ids := make([]ID, len(cs))
	for i, c := range cs {
		ids[i] = c.ID
	}
	return ids
}
