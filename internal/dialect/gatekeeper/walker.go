package gatekeeper

import (
	"fmt"
	"strconv"

	"github.com/morph-dev/morph/internal/dialect/gatekeeper/path"
	"github.com/morph-dev/morph/internal/engine"
)

// setter decides what happens at the end of a location; it is all a mutator kind adds
// to the one walker. Given the current value (exists is false when the field or list
// element is missing) it returns the new value and whether it differs. It must not
// modify cur: it returns a new value instead.
type setter interface {
	set(env env, cur any, exists bool) (next any, changed bool, err error)
}

// env is what a setter may read about the request. It is passed by value, so that a walk
// that changes nothing allocates nothing.
type env struct {
	req *engine.Request
	obj map[string]any
	id  *engine.ID
}

// walker descends one location of one mutator through an object, creating missing
// parents and keyed-list elements, visiting every element of a glob, and copying on write
// through the engine's Writer. It records a JSON Pointer for every value a setter
// changed, and knows that something changed only because a setter said so.
type walker struct {
	loc    path.Path
	tester *path.Tester
	set    setter
	env    env
	w      *engine.Writer
	segs   [inlineSegs]seg
	deep   []seg // the segments beyond inlineSegs, for deep locations
}

// seg is the pointer segment of one node of the location: a field name or a list
// index. The walker keeps them in a fixed array (on the stack for the usual short
// locations); the pointer string is built only when something changed.
type seg struct {
	key   string
	index int // -1 for a field
}

// inlineSegs is the location depth the walker handles without allocating.
const inlineSegs = 16

func (wk *walker) seg(i int) *seg {
	if i < inlineSegs {
		return &wk.segs[i]
	}
	return &wk.deep[i-inlineSegs]
}

// pointer returns the JSON Pointer of the value at node i.
func (wk *walker) pointer(i int) string {
	var buf [128]byte
	b := buf[:0]
	for j := 0; j <= i; j++ {
		s := wk.seg(j)
		if s.index >= 0 {
			b = strconv.AppendInt(append(b, '/'), int64(s.index), 10)
		} else {
			b = engine.AppendKey(b, s.key)
		}
	}
	return string(b)
}

// walk applies the setter at the location in obj and returns the new object, or obj
// itself when nothing changed.
func (wk *walker) walk(obj map[string]any) (map[string]any, bool, error) {
	if n := len(wk.loc.Nodes); n > inlineSegs {
		wk.deep = make([]seg, n-inlineSegs)
	}
	return wk.field(obj, 0)
}

// field applies node i, a field, to obj (nil when obj does not exist yet: it is created
// only if something below changes).
func (wk *walker) field(obj map[string]any, i int) (map[string]any, bool, error) {
	nodes := wk.loc.Nodes
	n := &nodes[i]
	child, exists := obj[n.Name]
	last := i == len(nodes)-1
	if !wk.tester.Allows(i, exists) {
		return obj, false, nil
	}
	*wk.seg(i) = seg{key: n.Name, index: -1}
	var next any
	var changed bool
	var err error
	switch {
	case last:
		next, changed, err = wk.set.set(wk.env, child, exists)
		if changed {
			wk.w.Changed(wk.pointer(i))
		} else if err == nil && obj == nil && i > 0 {
			// The walk created the parents and reached the setter, which left the field
			// missing (a prune of a missing list): the parents stay, as in Gatekeeper,
			// where reaching the setter counts as a mutation (core.Mutate).
			wk.w.Changed(wk.pointer(i - 1))
			return wk.w.Map(nil), true, nil
		}
	case nodes[i+1].Kind == path.List:
		l, ok := child.([]any)
		if exists && !ok {
			return obj, false, wk.mismatch(i, "a list", child)
		}
		var nl []any
		if nl, changed, err = wk.list(l, i+1); changed {
			next = nl
		}
	default:
		m, ok := child.(map[string]any)
		if exists && !ok {
			return obj, false, wk.mismatch(i, "an object", child)
		}
		var nm map[string]any
		if nm, changed, err = wk.field(m, i+1); changed {
			next = nm
		}
	}
	if err != nil || !changed {
		return obj, false, err
	}
	out := wk.w.Map(obj)
	out[n.Name] = next
	return out, true, nil
}

// list applies node i, a keyed list, to l (nil when the list does not exist yet).
func (wk *walker) list(l []any, i int) ([]any, bool, error) {
	nodes := wk.loc.Nodes
	n := &nodes[i]
	if n.Glob {
		// A glob visits every element, also those without the key field; an element
		// that is not an object does not fit the location (core.Mutate in Gatekeeper).
		if !wk.tester.Allows(i, true) {
			return l, false, nil
		}
		var out []any
		for j, e := range l {
			em, ok := e.(map[string]any)
			if !ok {
				return l, false, wk.mismatch(i, "an object", e)
			}
			var err error
			if out, err = wk.element(l, out, i, j, em); err != nil {
				return l, false, err
			}
		}
		if out == nil {
			return l, false, nil
		}
		return out, true, nil
	}
	if i < len(nodes)-1 {
		return wk.keyed(l, i)
	}
	// The location ends at this element: Assign replaces the first element with the
	// key, or appends the value (setListElementToValue in Gatekeeper); every element
	// must be an object.
	idx := -1
	for j, e := range l {
		em, ok := e.(map[string]any)
		if !ok {
			return l, false, wk.mismatch(i, "an object", e)
		}
		if v, has := em[n.Name]; has && n.KeyMatches(v) {
			idx = j
			break
		}
	}
	exists := idx >= 0
	if !wk.tester.Allows(i, exists) {
		return l, false, nil
	}
	at := idx
	if !exists {
		at = len(l)
	}
	*wk.seg(i) = seg{index: at}
	var cur any
	if exists {
		cur = l[idx]
	}
	next, changed, err := wk.set.set(wk.env, cur, exists)
	if err != nil || !changed {
		return l, false, err
	}
	if m, ok := next.(map[string]any); !ok || !n.KeyMatches(m[n.Name]) {
		return l, false, fmt.Errorf("%s: the value must be an object whose %q is %v, as the location says", wk.loc.Prefix(i+1), n.Name, n.Value)
	}
	wk.w.Changed(wk.pointer(i))
	if exists {
		out := wk.w.List(l, 0)
		out[idx] = next
		return out, true, nil
	}
	out := wk.w.List(l, 1)
	return append(out, next), true, nil
}

// keyed applies node i, a keyed list node that is not the last, to l: every element
// whose key matches is visited (keys may repeat, as env names do); when none does, an
// element with only the key is created and visited. Elements that are not objects or
// lack the key are passed over (core.Mutate in Gatekeeper).
func (wk *walker) keyed(l []any, i int) ([]any, bool, error) {
	n := &wk.loc.Nodes[i]
	var out []any
	found := false
	for j, e := range l {
		em, ok := e.(map[string]any)
		if !ok {
			continue
		}
		if v, has := em[n.Name]; !has || !n.KeyMatches(v) {
			continue
		}
		found = true
		if !wk.tester.Allows(i, true) {
			return l, false, nil
		}
		var err error
		if out, err = wk.element(l, out, i, j, em); err != nil {
			return l, false, err
		}
	}
	if found {
		if out == nil {
			return l, false, nil
		}
		return out, true, nil
	}
	if !wk.tester.Allows(i, false) {
		return l, false, nil
	}
	*wk.seg(i) = seg{index: len(l)}
	ne, changed, err := wk.field(nil, i+1)
	if err != nil || !changed {
		return l, false, err
	}
	ne[n.Name] = n.Value // a created element gets its key
	out = wk.w.List(l, 1)
	return append(out, ne), true, nil
}

func (wk *walker) mismatch(i int, want string, found any) error {
	return fmt.Errorf("%s: expected %s, found %s; the location does not fit this object", wk.loc.Prefix(i+1), want, describe(found))
}

// element descends into element j (the object em) of the list l at depth i. The first
// change copies l into out (copy on write); out is returned with the changed element.
func (wk *walker) element(l, out []any, i, j int, em map[string]any) ([]any, error) {
	*wk.seg(i) = seg{index: j}
	ne, changed, err := wk.field(em, i+1)
	if err != nil || !changed {
		return out, err
	}
	if out == nil {
		out = wk.w.List(l, 0)
	}
	out[j] = ne
	return out, nil
}
