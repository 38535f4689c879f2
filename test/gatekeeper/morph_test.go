package gatekeeper

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"

	gk "github.com/morph-dev/morph/internal/dialect/gatekeeper"
	"github.com/morph-dev/morph/internal/engine"
	"github.com/morph-dev/morph/internal/policy"
)

// morphResult is what morph's Gatekeeper dialect made of a case.
type morphResult struct {
	// LoadErrors are the documents morph refused, one line each.
	LoadErrors []string
	// Refused maps Kind/name of each refused document to its error.
	Refused map[string]string
	// Accepted lists Kind/name of the compiled mutators (conflicting ones are dropped).
	Accepted     []string
	Failed       []string
	Object       map[string]any
	NotConverged bool
	Error        string
}

func runMorph(c Case) morphResult {
	var r morphResult
	// Both engines see the object as JSON carries it (a nil Go slice is null).
	c.Object = clone(c.Object)
	if c.Namespace != nil {
		c.Namespace = clone(c.Namespace)
	}
	docs, err := policy.Decode("case.yaml", []byte(c.Mutators))
	if err != nil {
		r.Error = err.Error()
		return r
	}
	d := gk.New(gk.Options{})
	var handled []policy.Document
	for _, doc := range docs {
		if d.Handles(doc.APIVersion(), doc.Kind()) {
			handled = append(handled, doc)
		} else {
			r.LoadErrors = append(r.LoadErrors, fmt.Sprintf("%s: no dialect handles %s %s", doc.Where(), doc.APIVersion(), doc.Kind()))
		}
	}
	b, err := d.Compile(handled)
	r.Refused = map[string]string{}
	for _, e := range policy.Errors(err) {
		r.LoadErrors = append(r.LoadErrors, e.Error())
		var pe *policy.Error
		if errors.As(e, &pe) {
			r.Refused[pe.Doc.Kind()+"/"+pe.Doc.Name()] += e.Error()
		}
	}
	for _, m := range b.Mutators {
		r.Accepted = append(r.Accepted, m.ID.Kind+"/"+m.ID.Name)
	}
	slices.Sort(r.Accepted)
	set, err := engine.NewSet(b.Mutators, b.Finalizers...)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	res, err := set.Mutate(context.Background(), morphRequest(c))
	if err != nil {
		r.Error = err.Error()
		var nc *engine.NotConvergedError
		r.NotConverged = errors.As(err, &nc)
		return r
	}
	for _, f := range res.Failures {
		r.Failed = append(r.Failed, f.ID.Kind+"/"+f.ID.Name)
	}
	r.Object = res.Object
	return r
}

// morphRequest is the request a surface builds for the case (a Namespace is its own
// namespace object).
func morphRequest(c Case) *engine.Request {
	apiVersion, _ := c.Object["apiVersion"].(string)
	kind, _ := c.Object["kind"].(string)
	gv, _ := schema.ParseGroupVersion(apiVersion)
	meta, _ := c.Object["metadata"].(map[string]any)
	name, _ := meta["name"].(string)
	req := &engine.Request{
		Kind:            gv.WithKind(kind),
		Operation:       engine.Operation(c.Operation),
		Namespace:       c.RequestNamespace,
		Name:            name,
		Object:          c.Object,
		NamespaceObject: c.Namespace,
		Source:          engine.Source(c.Source),
	}
	if kind == "Namespace" && gv.Group == "" {
		req.Namespace, req.NamespaceObject = "", nil
	}
	return req
}

// comparison is the verdict on one case.
type comparison struct {
	Same bool
	// What says how they differ ("" when Same).
	What string
}

func compare(m morphResult, o oracleResult) comparison {
	if o.Error != "" && !o.NotConverged && o.Object == nil && strings.HasPrefix(o.Error, "oracle:") {
		return comparison{What: "oracle error: " + o.Error}
	}
	if !slices.Equal(m.Accepted, o.Accepted) {
		return comparison{What: fmt.Sprintf("accepted mutators differ: morph %v, gatekeeper %v", m.Accepted, o.Accepted)}
	}
	if m.NotConverged != o.NotConverged {
		return comparison{What: fmt.Sprintf("convergence differs: morph not converged=%v, gatekeeper not converged=%v", m.NotConverged, o.NotConverged)}
	}
	if m.NotConverged {
		return comparison{Same: true}
	}
	if (m.Error != "") != (o.Error != "") {
		return comparison{What: fmt.Sprintf("errors differ: morph %q, gatekeeper %q", m.Error, o.Error)}
	}
	if m.Error != "" {
		return comparison{Same: true}
	}
	mf, of := slices.Clone(m.Failed), slices.Clone(o.Failed)
	slices.Sort(mf)
	slices.Sort(of)
	if !slices.Equal(mf, of) {
		return comparison{What: fmt.Sprintf("failing mutators differ: morph %v, gatekeeper %v", mf, of)}
	}
	if !jsonEqual(m.Object, o.Object) {
		return comparison{What: "objects differ"}
	}
	return comparison{Same: true}
}

// jsonEqual compares two objects as JSON (an int64 1 and a float64 1 are one number).
func jsonEqual(a, b map[string]any) bool {
	return string(canonical(a)) == string(canonical(b))
}

func canonical(v any) []byte {
	raw, err := json.Marshal(v)
	if err != nil {
		return []byte(err.Error())
	}
	var x any
	if err := json.Unmarshal(raw, &x); err != nil {
		return []byte(err.Error())
	}
	raw, _ = json.Marshal(x)
	return raw
}
