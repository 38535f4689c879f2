package gatekeeper

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/morph-dev/morph/internal/dialect/gatekeeper/path"
	"github.com/morph-dev/morph/internal/engine"
)

// schemaType is what a mutator implies about the value at a path of a kind.
type schemaType struct {
	kind schemaKind
	key  string // the key field of a keyed list
}

type schemaKind uint8

const (
	schemaUnknown schemaKind = iota // Assign's value: anything
	schemaObject
	schemaList // a keyed list
	schemaSet  // ModifySet's list of values
	schemaString
)

func (t schemaType) String() string {
	switch t.kind {
	case schemaObject:
		return "an object"
	case schemaList:
		return "a list keyed by " + strconv.Quote(t.key)
	case schemaSet:
		return "a list of values (ModifySet)"
	case schemaString:
		return "a string (AssignImage)"
	}
	return "any value"
}

// schemaPath prints the schema position of the first n nodes: list elements as "[]",
// since every element of a list has the same schema whatever its key.
func schemaPath(loc path.Path, n int) string {
	var b strings.Builder
	for i, nd := range loc.Nodes[:n] {
		if nd.Kind == path.List {
			b.WriteString("[]")
			continue
		}
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(path.Path{Nodes: []path.Node{nd}}.String())
	}
	return b.String()
}

// implied lists the schema a mutator implies: for each prefix of its location, the type
// of the value there. The last position gets the mutator's leaf type.
func implied(m *mutator) []struct {
	at string
	t  schemaType
} {
	var out []struct {
		at string
		t  schemaType
	}
	nodes := m.loc.Nodes
	for i := range nodes {
		var t schemaType
		switch {
		case i == len(nodes)-1:
			t = m.leaf
		case nodes[i+1].Kind == path.List:
			t = schemaType{kind: schemaList, key: nodes[i+1].Name}
		default:
			t = schemaType{kind: schemaObject}
		}
		if t.kind == schemaUnknown {
			continue
		}
		out = append(out, struct {
			at string
			t  schemaType
		}{schemaPath(m.loc, i+1), t})
	}
	return out
}

// findConflicts returns every mutator in conflict, with the warnings that concern it,
// and all the warnings. Two mutators conflict when they imply different types for the same path of the
// same group/version/kind (Gatekeeper's schema conflict): such a pair could never
// converge, so both are skipped while the others keep working.
func findConflicts(ms []*mutator) (map[*mutator][]string, []string) {
	type key struct {
		gvk schema.GroupVersionKind
		op  engine.Operation
		at  string
	}
	type claim struct {
		t schemaType
		m *mutator
	}
	claims := map[key][]claim{}
	var order []key
	for _, m := range ms {
		if len(m.gvks) == 0 {
			continue // AssignMetadata: no applyTo, no schema (as in Gatekeeper)
		}
		// Gatekeeper keeps one schema per binding, a kind and an operation
		// (pkg/mutation/schema/schema.go, DB.upsert): mutators bound to different
		// operations never conflict.
		for _, t := range m.targets {
			gvk := schema.GroupVersionKind{Group: t.Group, Version: t.Version, Kind: t.Kind}
			for _, op := range []engine.Operation{engine.Create, engine.Update} {
				if !t.Operations.Has(op) {
					continue
				}
				for _, im := range implied(m) {
					k := key{gvk, op, im.at}
					if _, seen := claims[k]; !seen {
						order = append(order, k)
					}
					if cs := claims[k]; len(cs) > 0 && cs[len(cs)-1].m == m && cs[len(cs)-1].t == im.t {
						continue // one applyTo entry repeating a kind
					}
					claims[k] = append(claims[k], claim{im.t, m})
				}
			}
		}
	}
	bad := map[*mutator][]string{}
	var warnings []string
	reported := map[string]bool{}
	for _, k := range order {
		cs := claims[k]
		differ := false
		for _, c := range cs[1:] {
			if c.t != cs[0].t {
				differ = true
				break
			}
		}
		if !differ {
			continue
		}
		var parts []string
		for _, c := range cs {
			parts = append(parts, fmt.Sprintf("%s %q (%s: document %d) treats it as %s", c.m.id.Kind, c.m.id.Name, c.m.doc.File, c.m.doc.Index, c.t))
		}
		slices.Sort(parts)
		parts = slices.Compact(parts)
		gv := k.gvk.GroupVersion().String()
		msg := fmt.Sprintf("schema conflict at %s of %s %s: %s; these mutators are skipped until they agree", k.at, gv, k.gvk.Kind, strings.Join(parts, ", "))
		if !reported[msg] {
			reported[msg] = true
			warnings = append(warnings, msg)
			for _, c := range cs {
				if !slices.Contains(bad[c.m], msg) {
					bad[c.m] = append(bad[c.m], msg)
				}
			}
		}
	}
	return bad, warnings
}
