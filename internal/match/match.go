// Package match holds the matching every dialect shares: name and namespace globs, label
// selectors on decoded objects, and reading metadata from a decoded object. Everything
// is compiled once, at load, and evaluated without allocating per request.
package match

import (
	"encoding/json"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Glob matches names: "*" anything, "abc*" a prefix, "*abc" a suffix, "*abc*" a part,
// anything else exactly.
type Glob struct {
	text           string
	prefix, suffix bool
	pattern        string
}

// NewGlob compiles a glob. A "*" anywhere but at the start or end is an error.
func NewGlob(s string) (Glob, error) {
	g := Glob{text: s, pattern: s}
	if strings.HasPrefix(g.pattern, "*") {
		g.suffix = true
		g.pattern = g.pattern[1:]
	}
	if strings.HasSuffix(g.pattern, "*") {
		g.prefix = true
		g.pattern = g.pattern[:len(g.pattern)-1]
	}
	if strings.Contains(g.pattern, "*") {
		return Glob{}, fmt.Errorf("%q: a * may only stand at the start or the end", s)
	}
	return g, nil
}

// Match reports whether s matches.
func (g Glob) Match(s string) bool {
	switch {
	case g.prefix && g.suffix:
		return strings.Contains(s, g.pattern)
	case g.prefix:
		return strings.HasPrefix(s, g.pattern)
	case g.suffix:
		return strings.HasSuffix(s, g.pattern)
	}
	return s == g.pattern
}

// Globs is a list of globs; it matches when any glob matches.
type Globs []Glob

// NewGlobs compiles a list of globs.
func NewGlobs(ss []string) (Globs, error) {
	gs := make(Globs, 0, len(ss))
	for i, s := range ss {
		g, err := NewGlob(s)
		if err != nil {
			return nil, fmt.Errorf("[%d]: %w", i, err)
		}
		gs = append(gs, g)
	}
	return gs, nil
}

// Any reports whether some glob matches s.
func (gs Globs) Any(s string) bool {
	for _, g := range gs {
		if g.Match(s) {
			return true
		}
	}
	return false
}

// Selector is a compiled label selector. The nil Selector matches everything.
type Selector struct {
	sel labels.Selector
}

// NewSelector compiles a metav1.LabelSelector given as decoded YAML (a map with
// matchLabels and matchExpressions). nil gives the Selector that matches everything.
func NewSelector(v any) (*Selector, error) {
	if v == nil {
		return nil, nil
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var ls metav1.LabelSelector
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&ls); err != nil {
		return nil, fmt.Errorf("not a label selector: %w", err)
	}
	sel, err := metav1.LabelSelectorAsSelector(&ls)
	if err != nil {
		return nil, err
	}
	return &Selector{sel: sel}, nil
}

// Matches evaluates the selector on a label map of a decoded object.
func (s *Selector) Matches(lbls map[string]any) bool {
	if s == nil {
		return true
	}
	return s.sel.Matches(objectLabels(lbls))
}

// objectLabels adapts a decoded label map to labels.Labels without copying it.
type objectLabels map[string]any

func (l objectLabels) Has(k string) bool { _, ok := l[k]; return ok }
func (l objectLabels) Get(k string) string {
	s, _ := l[k].(string)
	return s
}
func (l objectLabels) Lookup(k string) (string, bool) {
	v, ok := l[k]
	if !ok {
		return "", false
	}
	s, _ := v.(string)
	return s, true
}

// Metadata returns obj.metadata, or nil.
func Metadata(obj map[string]any) map[string]any {
	m, _ := obj["metadata"].(map[string]any)
	return m
}

// Labels returns obj.metadata.labels, or nil.
func Labels(obj map[string]any) map[string]any {
	l, _ := Metadata(obj)["labels"].(map[string]any)
	return l
}
