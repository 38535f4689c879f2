package gatekeeper

import (
	"encoding/json"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// minimise shrinks a differing case greedily (fewer mutators, no match, fewer path
// tests, fewer fields and list elements in the object) while it still differs for the
// same reason, so that the failure prints what matters.
func minimise(t *testing.T, o *oracle, c Case) Case {
	t.Helper()
	budget := 400
	reason := func(c Case) string {
		r, err := o.run(c)
		if err != nil {
			t.Fatal(err)
		}
		m := runMorph(c)
		v := compare(m, r)
		if v.Same || classify(c, m, r) != "" {
			return ""
		}
		return v.What
	}
	want := reason(c)
	if want == "" {
		return c
	}
	try := func(next Case) bool {
		if budget <= 0 {
			return false
		}
		budget--
		return reason(next) == want
	}
	for changed := true; changed && budget > 0; {
		changed = false
		// Mutator documents, then parts of each.
		docs := strings.Split(c.Mutators, "---\n")
		for i := 0; len(docs) > 1 && i < len(docs); i++ {
			next := c
			next.Mutators = strings.Join(append(append([]string{}, docs[:i]...), docs[i+1:]...), "---\n")
			if try(next) {
				c, docs, changed = next, strings.Split(next.Mutators, "---\n"), true
				i--
			}
		}
		for i := range docs {
			for _, cand := range shrinkDoc(docs[i]) {
				nd := append([]string{}, docs...)
				nd[i] = cand
				next := c
				next.Mutators = strings.Join(nd, "---\n")
				if try(next) {
					c, docs, changed = next, nd, true
					break
				}
			}
		}
		// The object.
		for _, cand := range shrinkValue(c.Object, 0) {
			m, ok := cand.(map[string]any)
			if !ok {
				continue
			}
			next := c
			next.Object = m
			if try(next) {
				c, changed = next, true
				break
			}
		}
	}
	return c
}

// shrinkDoc returns smaller versions of one mutator document.
func shrinkDoc(doc string) []string {
	var m map[string]any
	if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
		return nil
	}
	var out []string
	emit := func(v map[string]any) {
		raw, err := yaml.Marshal(v)
		if err == nil {
			out = append(out, string(raw))
		}
	}
	spec, _ := m["spec"].(map[string]any)
	if spec == nil {
		return nil
	}
	if _, ok := spec["match"]; ok {
		c := clone(m)
		delete(c["spec"].(map[string]any), "match")
		emit(c)
	}
	if params, _ := spec["parameters"].(map[string]any); params != nil {
		if tests, _ := params["pathTests"].([]any); len(tests) > 0 {
			for i := range tests {
				c := clone(m)
				p := c["spec"].(map[string]any)["parameters"].(map[string]any)
				l := p["pathTests"].([]any)
				p["pathTests"] = append(l[:i:i], l[i+1:]...)
				if len(p["pathTests"].([]any)) == 0 {
					delete(p, "pathTests")
				}
				emit(c)
			}
		}
	}
	return out
}

// shrinkValue returns copies of v with one map entry or list element removed, one level
// at a time, deepest last. apiVersion, kind and metadata.name stay.
func shrinkValue(v any, depth int) []any {
	var out []any
	switch x := v.(type) {
	case map[string]any:
		for k := range x {
			if depth == 0 && (k == "apiVersion" || k == "kind" || k == "metadata") {
				continue
			}
			c := clone(x)
			delete(c, k)
			out = append(out, c)
		}
		for k, child := range x {
			if depth == 0 && (k == "apiVersion" || k == "kind") {
				continue
			}
			for _, sc := range shrinkValue(child, depth+1) {
				c := clone(x)
				c[k] = sc
				out = append(out, c)
			}
		}
	case []any:
		for i := range x {
			c := append(append([]any{}, x[:i]...), x[i+1:]...)
			out = append(out, c)
		}
		for i, child := range x {
			for _, sc := range shrinkValue(child, depth+1) {
				c := append([]any{}, x...)
				c[i] = sc
				out = append(out, c)
			}
		}
	}
	return out
}

func clone(m map[string]any) map[string]any {
	raw, _ := json.Marshal(m)
	var c map[string]any
	d := json.NewDecoder(strings.NewReader(string(raw)))
	d.UseNumber()
	_ = d.Decode(&c)
	return fixNumbers(c).(map[string]any)
}

// fixNumbers turns json.Number into int64 or float64, as morph's decoder has them.
func fixNumbers(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = fixNumbers(e)
		}
	case []any:
		for i, e := range x {
			x[i] = fixNumbers(e)
		}
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, _ := x.Float64()
		return f
	}
	return v
}
