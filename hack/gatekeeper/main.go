// Command gatekeeper-oracle runs Gatekeeper v3.23.1's own mutation system on a batch
// of cases, for morph's differential test (test/gatekeeper). It is a separate module
// (hack/gatekeeper/go.mod) so that Gatekeeper never enters morph's dependency graph;
// hack/build-gatekeeper.sh builds and caches it.
//
// Each line of standard input is one case (JSON, see caseIn); each line of standard
// output is its result (caseOut), in order. A case is processed the way a cluster with
// Gatekeeper installed would process it:
//
//  1. every mutator document goes through what the API server does to a custom
//     resource of Gatekeeper's CRDs (manifest_staging/charts/gatekeeper/crds, read from
//     -crds): the version must be served, unknown fields are refused (kubectl's default
//     strict field validation), defaults are applied, the schema is validated;
//  2. the document is decoded into Gatekeeper's unversioned type and built with
//     Gatekeeper's constructor (mutators.MutatorFor*), as its validating webhook and its
//     mutator controller do: a constructor error refuses the mutator;
//  3. the mutators are upserted into a mutation.System in document order (a second
//     document with the same kind and name replaces the first, as a second kubectl
//     apply would); schema conflicts are reported and the conflicting mutators stay
//     inert, as in Gatekeeper;
//  4. System.Mutate runs on the object with the webhook's namespace semantics
//     (pkg/webhook/mutation.go mutateRequest): a Namespace is its own namespace object,
//     a namespaced object gets the request's namespace for the duration of the mutation.
//
// With "isolate" set, a mutator whose Matches or Mutate fails is disabled and the
// mutation starts again from the original object (the failure is listed in "failed"):
// that is morph's default failure isolation, applied to Gatekeeper's system so that
// the outputs can be compared. Without it, the first failure fails the case, as in
// Gatekeeper's webhook.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	mutationsunversioned "github.com/open-policy-agent/gatekeeper/v3/apis/mutations/unversioned"
	"github.com/open-policy-agent/gatekeeper/v3/pkg/mutation"
	"github.com/open-policy-agent/gatekeeper/v3/pkg/mutation/mutators"
	"github.com/open-policy-agent/gatekeeper/v3/pkg/mutation/path/parser"
	"github.com/open-policy-agent/gatekeeper/v3/pkg/mutation/schema"
	"github.com/open-policy-agent/gatekeeper/v3/pkg/mutation/types"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// caseIn is one case.
type caseIn struct {
	ID string `json:"id"`
	// Mutators is a YAML stream of mutator documents.
	Mutators string `json:"mutators"`
	// Object is the object under admission.
	Object json.RawMessage `json:"object"`
	// RequestNamespace is the admission request's namespace ("" for cluster-scoped kinds).
	RequestNamespace string `json:"requestNamespace,omitempty"`
	// Namespace is the Namespace object of RequestNamespace, as the webhook reads it.
	Namespace json.RawMessage `json:"namespace,omitempty"`
	Operation string          `json:"operation,omitempty"`
	Source    string          `json:"source,omitempty"`
	Username  string          `json:"username,omitempty"`
	Isolate   bool            `json:"isolate,omitempty"`
}

// refusal is a mutator document Gatekeeper (or the API server in front of it) refuses.
type refusal struct {
	Index  int    `json:"index"` // of the document in the stream, from 0
	Kind   string `json:"kind"`
	Name   string `json:"name"`
	Stage  string `json:"stage"` // "served", "schema" or "constructor"
	Reason string `json:"reason"`
}

// caseOut is one result.
type caseOut struct {
	ID      string    `json:"id"`
	Refused []refusal `json:"refused,omitempty"`
	// Replaced lists Kind/name of documents replaced by a later one with the same name.
	Replaced []string `json:"replaced,omitempty"`
	// Accepted lists Kind/name of the mutators in the system without schema
	// conflicts, in Gatekeeper's order.
	Accepted []string `json:"accepted,omitempty"`
	// Conflicts lists Kind/name of the mutators with schema conflicts (inert).
	Conflicts []string `json:"conflicts,omitempty"`
	// Failed lists Kind/name of the mutators disabled by isolation, in order.
	Failed []string `json:"failed,omitempty"`
	// Object is the final object (the input when nothing changed); null on error.
	Object       map[string]any `json:"object"`
	Mutated      bool           `json:"mutated"`
	NotConverged bool           `json:"notConverged,omitempty"`
	Error        string         `json:"error,omitempty"`
}

const group = "mutations.gatekeeper.sh"

// crdVersion is one served version of a mutator CRD, ready to validate documents.
type crdVersion struct {
	structural *structuralschema.Structural
	validator  validation.SchemaValidator
}

type oracle struct {
	crds map[string]map[string]*crdVersion // kind -> version -> schema
}

func main() {
	self, _ := os.Executable()
	crdDir := flag.String("crds", filepath.Join(filepath.Dir(self), "crds"), "directory of Gatekeeper's mutator CRDs")
	flag.Parse()
	o, err := loadCRDs(*crdDir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gatekeeper-oracle:", err)
		os.Exit(2)
	}
	in := bufio.NewReaderSize(os.Stdin, 1<<20)
	out := bufio.NewWriterSize(os.Stdout, 1<<20)
	defer out.Flush()
	enc := json.NewEncoder(out)
	for {
		line, err := in.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			var c caseIn
			res := caseOut{}
			if derr := json.Unmarshal(line, &c); derr != nil {
				res.Error = "oracle: bad case: " + derr.Error()
			} else {
				res = o.run(c)
			}
			res.ID = c.ID
			if eerr := enc.Encode(res); eerr != nil {
				fmt.Fprintln(os.Stderr, "gatekeeper-oracle:", eerr)
				os.Exit(2)
			}
			// Flush per case when the input is interactive (a pipe read line by line).
			if in.Buffered() == 0 {
				out.Flush()
			}
		}
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "gatekeeper-oracle:", err)
			os.Exit(2)
		}
	}
}

func loadCRDs(dir string) (*oracle, error) {
	o := &oracle{crds: map[string]map[string]*crdVersion{}}
	for _, file := range []string{"assign", "assignmetadata", "modifyset", "assignimage"} {
		path := filepath.Join(dir, file+"-customresourcedefinition.yaml")
		raw, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.UnmarshalStrict(bytes.TrimPrefix(raw, []byte("---\n")), &crd); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		versions := map[string]*crdVersion{}
		for _, v := range crd.Spec.Versions {
			if !v.Served || v.Schema == nil {
				continue
			}
			var internal apiextensions.JSONSchemaProps
			if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(v.Schema.OpenAPIV3Schema, &internal, nil); err != nil {
				return nil, fmt.Errorf("%s %s: %w", path, v.Name, err)
			}
			s, err := structuralschema.NewStructural(&internal)
			if err != nil {
				return nil, fmt.Errorf("%s %s: %w", path, v.Name, err)
			}
			val, _, err := validation.NewSchemaValidator(&internal)
			if err != nil {
				return nil, fmt.Errorf("%s %s: %w", path, v.Name, err)
			}
			versions[v.Name] = &crdVersion{structural: s, validator: val}
		}
		o.crds[crd.Spec.Names.Kind] = versions
	}
	return o, nil
}

// admit is what the API server and Gatekeeper's webhook and controller do to one
// mutator document; it returns the constructed mutator or the refusal.
func (o *oracle) admit(i int, doc map[string]any) (types.Mutator, *refusal) {
	u := unstructured.Unstructured{Object: doc}
	r := &refusal{Index: i, Kind: u.GetKind(), Name: u.GetName()}
	gv := strings.SplitN(u.GetAPIVersion(), "/", 2)
	versions, known := o.crds[u.GetKind()]
	var v *crdVersion
	if known && len(gv) == 2 && gv[0] == group {
		v = versions[gv[1]]
	}
	if v == nil {
		r.Stage, r.Reason = "served", fmt.Sprintf("no matches for kind %q in version %q", u.GetKind(), u.GetAPIVersion())
		return nil, r
	}
	if unknown := pruning.PruneWithOptions(doc, v.structural, true, structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true}); len(unknown) > 0 {
		r.Stage, r.Reason = "schema", fmt.Sprintf("strict decoding error: unknown field %q", strings.Join(unknown, `", "`))
		return nil, r
	}
	structuraldefaulting.PruneNonNullableNullsWithoutDefaults(doc, v.structural)
	structuraldefaulting.Default(doc, v.structural)
	if errs := validation.ValidateCustomResource(nil, doc, v.validator); len(errs) > 0 {
		r.Stage, r.Reason = "schema", errs.ToAggregate().Error()
		return nil, r
	}
	raw, err := json.Marshal(doc)
	if err != nil {
		r.Stage, r.Reason = "schema", err.Error()
		return nil, r
	}
	var m types.Mutator
	switch u.GetKind() {
	case "Assign":
		var a mutationsunversioned.Assign
		if err = decode(raw, &a); err == nil {
			m, err = asMutator(mutators.MutatorForAssign(&a))
		}
	case "AssignMetadata":
		var a mutationsunversioned.AssignMetadata
		if err = decode(raw, &a); err == nil {
			m, err = asMutator(mutators.MutatorForAssignMetadata(&a))
		}
	case "ModifySet":
		var a mutationsunversioned.ModifySet
		if err = decode(raw, &a); err == nil {
			m, err = asMutator(mutators.MutatorForModifySet(&a))
		}
	case "AssignImage":
		var a mutationsunversioned.AssignImage
		if err = decode(raw, &a); err == nil {
			m, err = asMutator(mutators.MutatorForAssignImage(&a))
		}
	}
	if err != nil {
		r.Stage, r.Reason = "constructor", err.Error()
		return nil, r
	}
	return m, nil
}

// asMutator keeps a typed nil pointer from becoming a non-nil interface.
func asMutator[M types.Mutator](m M, err error) (types.Mutator, error) {
	if err != nil {
		return nil, err
	}
	return m, nil
}

// decode reads a document as the API machinery does (integers stay integers).
func decode(raw []byte, into any) error {
	return sigsjson.UnmarshalCaseSensitivePreserveInts(raw, into)
}

func idName(id types.ID) string { return id.Kind + "/" + id.Name }

func (o *oracle) run(c caseIn) caseOut {
	var res caseOut
	// Mutators.
	var ms []types.Mutator
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(c.Mutators), 4096)
	for i := 0; ; i++ {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			res.Error = "oracle: mutators: " + err.Error()
			return res
		}
		var doc map[string]any
		if err := utiljson.Unmarshal(raw, &doc); err != nil || doc == nil {
			res.Refused = append(res.Refused, refusal{Index: i, Stage: "schema", Reason: fmt.Sprintf("not an object: %v", err)})
			continue
		}
		m, r := o.admit(i, doc)
		if r != nil {
			res.Refused = append(res.Refused, *r)
			continue
		}
		ms = append(ms, m)
	}
	// The object and the request.
	obj := &unstructured.Unstructured{}
	if err := obj.UnmarshalJSON(c.Object); err != nil {
		res.Error = "oracle: object: " + err.Error()
		return res
	}
	var ns *corev1.Namespace
	reqNS := c.RequestNamespace
	gvk := obj.GroupVersionKind()
	switch {
	case gvk.Kind == "Namespace" && gvk.Group == "":
		reqNS = ""
		ns = &corev1.Namespace{}
		if err := json.Unmarshal(c.Object, ns); err != nil {
			res.Error = "oracle: namespace object: " + err.Error()
			return res
		}
	case reqNS != "":
		ns = &corev1.Namespace{}
		if len(c.Namespace) == 0 || string(c.Namespace) == "null" {
			res.Error = "oracle: the case has a request namespace but no Namespace object"
			return res
		}
		if err := json.Unmarshal(c.Namespace, ns); err != nil {
			res.Error = "oracle: namespace: " + err.Error()
			return res
		}
	}
	source := types.SourceType(c.Source)
	if source == "" {
		source = types.SourceTypeOriginal
	}
	op := admissionv1.Operation(c.Operation)
	if source == types.SourceTypeGenerated {
		// Expansion mutates generated resources with no operation
		// (pkg/expansion/system.go Expand).
		op = ""
	}

	rec := &recorder{disabled: map[types.ID]bool{}}
	sys := mutation.NewSystem(mutation.SystemOpts{})
	seen := map[types.ID]bool{}
	for _, m := range ms {
		id := m.ID()
		if seen[id] {
			res.Replaced = append(res.Replaced, idName(id))
		}
		seen[id] = true
		err := sys.Upsert(wrap(m, rec))
		if err != nil && !errors.As(err, &schema.ErrConflictingSchema{}) {
			res.Refused = append(res.Refused, refusal{Kind: id.Kind, Name: id.Name, Stage: "upsert", Reason: err.Error()})
		}
	}
	for id := range seen {
		if len(sys.GetConflicts(id)) > 0 {
			res.Conflicts = append(res.Conflicts, idName(id))
		} else if sys.Get(id) != nil {
			res.Accepted = append(res.Accepted, idName(id))
		}
	}
	slices.Sort(res.Conflicts)
	slices.Sort(res.Accepted)
	for attempt := 0; ; attempt++ {
		work := obj.DeepCopy()
		oldNS := work.GetNamespace()
		work.SetNamespace(reqNS)
		mutable := &types.Mutable{Object: work, Namespace: ns, Username: c.Username, Source: source, Operation: op}
		rec.failed = nil
		mutated, err := sys.Mutate(context.Background(), mutable)
		if err != nil {
			if c.Isolate && rec.failed != nil && attempt < len(ms)+1 {
				rec.disabled[*rec.failed] = true
				res.Failed = append(res.Failed, idName(*rec.failed))
				continue
			}
			res.Error = err.Error()
			res.NotConverged = errors.Is(err, mutation.ErrNotConverging)
			return res
		}
		work.SetNamespace(oldNS)
		res.Mutated = mutated
		res.Object = work.Object
		return res
	}
}

// recorder notes which mutator failed and which are disabled (isolation).
type recorder struct {
	disabled map[types.ID]bool
	failed   *types.ID
}

// tracked wraps a Gatekeeper mutator to record its failures and to disable it.
type tracked struct {
	types.Mutator
	rec *recorder
}

func (t *tracked) Matches(m *types.Mutable) (bool, error) {
	id := t.ID()
	if t.rec.disabled[id] {
		return false, nil
	}
	ok, err := t.Mutator.Matches(m)
	if err != nil {
		t.rec.failed = &id
	}
	return ok, err
}

func (t *tracked) Mutate(m *types.Mutable) (bool, error) {
	ok, err := t.Mutator.Mutate(m)
	if err != nil {
		id := t.ID()
		t.rec.failed = &id
	}
	return ok, err
}

func (t *tracked) DeepCopy() types.Mutator {
	return &tracked{Mutator: t.Mutator.DeepCopy(), rec: t.rec}
}

func (t *tracked) HasDiff(other types.Mutator) bool {
	if o, ok := other.(*tracked); ok {
		other = o.Mutator
	} else if o, ok := other.(*trackedSchema); ok {
		other = o.Mutator
	}
	return t.Mutator.HasDiff(other)
}

// trackedSchema is tracked for mutators with schema bindings (all but AssignMetadata).
type trackedSchema struct {
	tracked
}

func (t *trackedSchema) SchemaBindings() []schema.Binding {
	return t.Mutator.(schema.MutatorWithSchema).SchemaBindings()
}

func (t *trackedSchema) TerminalType() parser.NodeType {
	return t.Mutator.(schema.MutatorWithSchema).TerminalType()
}

func (t *trackedSchema) DeepCopy() types.Mutator {
	return &trackedSchema{tracked{Mutator: t.Mutator.DeepCopy(), rec: t.rec}}
}

func wrap(m types.Mutator, rec *recorder) types.Mutator {
	if _, ok := m.(schema.MutatorWithSchema); ok {
		return &trackedSchema{tracked{Mutator: m, rec: rec}}
	}
	return &tracked{Mutator: m, rec: rec}
}
