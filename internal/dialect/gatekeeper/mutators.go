package gatekeeper

import (
	"context"
	"fmt"
	"slices"
	"strconv"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/morph-dev/morph/internal/dialect/gatekeeper/path"
	"github.com/morph-dev/morph/internal/engine"
	"github.com/morph-dev/morph/internal/policy"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// The mutator kinds.
const (
	kindAssign         = "Assign"
	kindAssignMetadata = "AssignMetadata"
	kindModifySet      = "ModifySet"
	kindAssignImage    = "AssignImage"
)

// mutator is one compiled Gatekeeper mutator: its match, its location with the compiled
// pathTests, and the setter of its kind.
type mutator struct {
	doc        policy.Document
	id         engine.ID
	generation int64
	targets    []engine.Target
	gvks       []schema.GroupVersionKind // from applyTo, for schema conflicts
	match      *matcher
	loc        path.Path
	tester     *path.Tester
	set        setter
	failure    engine.FailurePolicy
	// leaf is the type the mutator gives the value at its location, for schema conflicts.
	leaf schemaType
	// external is set when the value comes from an external data provider.
	external *externalRef
}

// compiled is the mutator as the engine runs it: Gatekeeper mutators run in every pass
// until the object converges, as Gatekeeper's own system does.
func (m *mutator) compiled() engine.Mutator {
	d := engine.Descriptor{
		ID:            m.id,
		Targets:       m.targets,
		Reinvocation:  engine.ReinvokeIfNeeded,
		FailurePolicy: m.failure,
		Needs:         m.match.needs(m.targets),
	}
	return engine.Mutator{Descriptor: d, Mutate: m.mutate}
}

// matches evaluates spec.match; applyTo (group, version, kind, operation) is already
// enforced by the engine through the targets.
//
// A generated object (source Generated, Gatekeeper's expansion) is mutated with no
// operation in Gatekeeper (pkg/expansion/system.go, Expand), so only mutators that apply
// to every operation the webhook handles (CREATE and UPDATE) match it
// (MutationApplyTo.MatchesOperation); AssignMetadata has no applyTo and always may.
func (m *mutator) matches(req *engine.Request, obj map[string]any) (bool, error) {
	if req.Source == engine.SourceGenerated && m.id.Kind != kindAssignMetadata && !appliesToAllOperations(m.targets, req.Kind) {
		return false, nil
	}
	return m.match.matches(req, obj)
}

// appliesToAllOperations reports whether some target names gvk for both CREATE and
// UPDATE.
func appliesToAllOperations(targets []engine.Target, gvk schema.GroupVersionKind) bool {
	for _, t := range targets {
		if t.Group == gvk.Group && t.Version == gvk.Version && t.Kind == gvk.Kind && t.Operations.Has(engine.Create) && t.Operations.Has(engine.Update) {
			return true
		}
	}
	return false
}

// mutate evaluates spec.match, then walks the location and applies the kind's setter.
func (m *mutator) mutate(_ context.Context, req *engine.Request, obj map[string]any, w *engine.Writer) (map[string]any, error) {
	if ok, err := m.matches(req, obj); err != nil || !ok {
		if err != nil {
			return nil, fmt.Errorf("match: %w", err)
		}
		return obj, nil
	}
	wk := walker{loc: m.loc, tester: m.tester, set: m.set, env: env{req: req, obj: obj, id: &m.id}, w: w}
	out, changed, err := wk.walk(obj)
	if err != nil {
		return nil, fmt.Errorf("location %s: %w", m.loc.String(), err)
	}
	if !changed {
		return obj, nil
	}
	return out, nil
}

// annotationName is the mutator as Gatekeeper's gatekeeper.sh/mutations annotation
// names it: Kind/namespace/name:generation (mutators are cluster-scoped, so the
// namespace is empty).
func (m *mutator) annotationName() string {
	return m.id.Kind + "//" + m.id.Name + ":" + strconv.FormatInt(m.generation, 10)
}

// paramsPath is where every mutator kind keeps its parameters.
var paramsPath = field.NewPath("spec", "parameters")

// compiler holds what compiling one batch of documents needs.
type compiler struct {
	opts      Options
	grammar   imageGrammar
	providers map[string]*provider
	refs      []*externalRef
}

// compileMutator compiles one mutator document.
func (c *compiler) compileMutator(doc policy.Document) (*mutator, error) {
	f := fields{doc: doc}
	kind := doc.Kind()
	if err := f.known(doc.Object, nil, "apiVersion", "kind", "metadata", "spec", "status"); err != nil {
		return nil, err
	}
	name := doc.Name()
	if name == "" {
		return nil, f.fail(field.Required(field.NewPath("metadata", "name"), "name the mutator"))
	}
	if doc.Namespace() != "" {
		return nil, f.fail(field.Forbidden(field.NewPath("metadata", "namespace"), "Gatekeeper mutators are cluster-scoped; remove the namespace"))
	}
	if kind == kindAssignImage && doc.APIVersion() != "mutations.gatekeeper.sh/v1alpha1" {
		// Gatekeeper's CRD serves AssignImage at v1alpha1 only: the API server refuses
		// any other version, and so does morph rather than guess.
		return nil, f.fail(field.Invalid(field.NewPath("apiVersion"), doc.APIVersion(), "AssignImage is served only as mutations.gatekeeper.sh/v1alpha1 (Gatekeeper's CRD has no other version); change the apiVersion"))
	}
	m := &mutator{doc: doc, id: engine.ID{Dialect: dialectName, Kind: kind, Name: name}, generation: 1, failure: engine.FailIgnore}
	if c.opts.FailClosed {
		m.failure = engine.FailClose
	}
	meta, _ := doc.Object["metadata"].(map[string]any)
	order, err := doc.Order()
	if err != nil {
		return nil, err
	}
	m.id.Order = order
	if g, ok := meta["generation"].(int64); ok && g > 0 {
		m.generation = g
	}
	specPath := field.NewPath("spec")
	spec, err := f.object(doc.Object["spec"], specPath)
	if err != nil {
		return nil, err
	}
	if spec == nil {
		return nil, f.fail(field.Required(specPath, "give applyTo, location and parameters"))
	}
	allowed := []string{"applyTo", "match", "location", "parameters"}
	if kind == kindAssignMetadata {
		allowed = []string{"match", "location", "parameters"}
	}
	if err := f.known(spec, specPath, allowed...); err != nil {
		return nil, err
	}
	if m.match, err = parseMatch(f, spec["match"], c.opts.Objects); err != nil {
		return nil, err
	}
	locPath := specPath.Child("location")
	locText, err := f.str(spec["location"], locPath)
	if err != nil {
		return nil, err
	}
	if locText == "" {
		return nil, f.fail(field.Required(locPath, "give the path to change, such as spec.containers[name: *].imagePullPolicy"))
	}
	if m.loc, err = path.Parse(locText); err != nil {
		return nil, f.doc.Wrap(locPath, locText, err)
	}
	if err := checkLocation(f, kind, m.loc); err != nil {
		return nil, err
	}
	params, err := f.object(spec["parameters"], paramsPath)
	if err != nil {
		return nil, err
	}
	if kind == kindAssignMetadata {
		m.targets = metadataTargets(m.match)
	} else if m.targets, m.gvks, err = parseApplyTo(f, spec["applyTo"]); err != nil {
		return nil, err
	}
	var tests []path.Test
	switch kind {
	case kindAssign:
		err = c.assign(f, m, params)
	case kindAssignMetadata:
		err = c.assignMetadata(f, m, params)
	case kindModifySet:
		err = c.modifySet(f, m, params)
	case kindAssignImage:
		err = c.assignImage(f, m, params)
	}
	if err != nil {
		return nil, err
	}
	if kind != kindAssignMetadata {
		if tests, err = parsePathTests(f, params["pathTests"]); err != nil {
			return nil, err
		}
	}
	if m.tester, err = path.NewTester(m.loc, tests); err != nil {
		return nil, f.fail(field.Invalid(paramsPath.Child("pathTests"), field.OmitValueType{}, err.Error()))
	}
	return m, nil
}

// checkLocation enforces what each kind may address.
func checkLocation(f fields, kind string, loc path.Path) error {
	at := field.NewPath("spec", "location")
	text := loc.String()
	nodes := loc.Nodes
	for i := 0; i+1 < len(nodes); i++ {
		if nodes[i].Kind == path.List && nodes[i+1].Kind == path.Field && nodes[i+1].Name == nodes[i].Name {
			return f.fail(field.Invalid(at, text, fmt.Sprintf("changes the key field %q of the list %s, and a key cannot be changed; address the element instead", nodes[i].Name, loc.Prefix(i))))
		}
	}
	last := loc.Last()
	if kind == kindAssignMetadata {
		if len(nodes) != 3 || nodes[0].Name != "metadata" || (nodes[1].Name != "labels" && nodes[1].Name != "annotations") || nodes[1].Kind != path.Field || nodes[2].Kind != path.Field {
			return f.fail(field.Invalid(at, text, "AssignMetadata may only set metadata.labels.<key> or metadata.annotations.<key>"))
		}
		return nil
	}
	if nodes[0].Name == "metadata" {
		return f.fail(field.Invalid(at, text, fmt.Sprintf("%s may not change metadata; use an AssignMetadata mutator for labels and annotations", kind)))
	}
	if last.Kind == path.List && last.Glob {
		return f.fail(field.Invalid(at, text, fmt.Sprintf("ends in the glob [%s: *], and assigning to every element of a list is not allowed; address one element or a field below the glob", last.Name)))
	}
	if last.Kind == path.List && kind != kindAssign {
		return f.fail(field.Invalid(at, text, fmt.Sprintf("ends in a list element; the location of a %s must end in a field", kind)))
	}
	return nil
}

// parseApplyTo reads spec.applyTo into engine targets. "kind" is accepted as an alias of
// "kinds": the Policy Controller documentation's Jobs example spells it that way.
func parseApplyTo(f fields, v any) ([]engine.Target, []schema.GroupVersionKind, error) {
	at := field.NewPath("spec", "applyTo")
	entries, err := f.list(v, at)
	if err != nil {
		return nil, nil, err
	}
	if len(entries) == 0 {
		return nil, nil, f.fail(field.Required(at, `list the groups, versions and kinds the mutator changes, such as {groups: [""], versions: [v1], kinds: [Pod]}`))
	}
	var targets []engine.Target
	var gvks []schema.GroupVersionKind
	for i, e := range entries {
		ef := at.Index(i)
		em, err := f.object(e, ef)
		if err != nil {
			return nil, nil, err
		}
		if err := f.known(em, ef, "groups", "versions", "kinds", "kind", "operations"); err != nil {
			return nil, nil, err
		}
		lists := map[string][]string{}
		for _, k := range []string{"groups", "versions", "kinds", "kind", "operations"} {
			if lists[k], err = f.strings(em[k], ef.Child(k)); err != nil {
				return nil, nil, err
			}
		}
		kinds := append(lists["kinds"], lists["kind"]...)
		for _, k := range []string{"groups", "versions", "kinds"} {
			l := lists[k]
			if k == "kinds" {
				l = kinds
			}
			if len(l) == 0 {
				return nil, nil, f.fail(field.Required(ef.Child(k), "applyTo needs groups, versions and kinds"))
			}
			if slices.Contains(l, "*") {
				return nil, nil, f.fail(field.Invalid(ef.Child(k), "*", "applyTo does not accept globs; list the exact values"))
			}
		}
		var ops engine.OperationSet
		if len(lists["operations"]) == 0 {
			ops = createUpdate()
		}
		for j, o := range lists["operations"] {
			switch o {
			case "*":
				ops |= createUpdate()
			case string(engine.Create), string(engine.Update):
				s, _ := engine.OperationsOf(o)
				ops |= s
			default:
				return nil, nil, f.fail(field.NotSupported(ef.Child("operations").Index(j), o, []string{"CREATE", "UPDATE", "*"}))
			}
		}
		for _, g := range lists["groups"] {
			for _, ver := range lists["versions"] {
				for _, k := range kinds {
					targets = append(targets, engine.Target{Group: g, Version: ver, Kind: k, Operations: ops})
					gvk := schema.GroupVersionKind{Group: g, Version: ver, Kind: k}
					if !slices.Contains(gvks, gvk) {
						gvks = append(gvks, gvk)
					}
				}
			}
		}
	}
	return targets, gvks, nil
}

func createUpdate() engine.OperationSet {
	s, _ := engine.OperationsOf(string(engine.Create), string(engine.Update))
	return s
}

// metadataTargets derives AssignMetadata's targets from match.kinds (it has no applyTo):
// every version, CREATE and UPDATE.
func metadataTargets(m *matcher) []engine.Target {
	ops := createUpdate()
	if m.kindsGlobal {
		return []engine.Target{{Group: "*", Version: "*", Kind: "*", Operations: ops}}
	}
	var out []engine.Target
	for _, k := range m.kinds {
		groups, kinds := k.groups, k.kinds
		if k.anyGroup {
			groups = []string{"*"}
		}
		if k.anyKind {
			kinds = []string{"*"}
		}
		for _, g := range groups {
			for _, kd := range kinds {
				t := engine.Target{Group: g, Version: "*", Kind: kd, Operations: ops}
				if !slices.Contains(out, t) {
					out = append(out, t)
				}
			}
		}
	}
	return out
}

func parsePathTests(f fields, v any) ([]path.Test, error) {
	at := paramsPath.Child("pathTests")
	l, err := f.list(v, at)
	if err != nil {
		return nil, err
	}
	tests := make([]path.Test, 0, len(l))
	for i, e := range l {
		ef := at.Index(i)
		em, err := f.object(e, ef)
		if err != nil {
			return nil, err
		}
		if err := f.known(em, ef, "subPath", "condition"); err != nil {
			return nil, err
		}
		sub, err := f.str(em["subPath"], ef.Child("subPath"))
		if err != nil {
			return nil, err
		}
		p, err := path.Parse(sub)
		if err != nil {
			return nil, f.doc.Wrap(ef.Child("subPath"), sub, err)
		}
		cs, err := f.str(em["condition"], ef.Child("condition"))
		if err != nil {
			return nil, err
		}
		cond, err := path.ParseCondition(cs)
		if err != nil {
			return nil, f.fail(field.NotSupported(ef.Child("condition"), cs, []string{path.MustExist.String(), path.MustNotExist.String()}))
		}
		tests = append(tests, path.Test{SubPath: p, Condition: cond})
	}
	return tests, nil
}

// assignSource is where Assign and AssignMetadata take their value from.
type assignSource struct {
	value        any
	fromMetadata string // "", "namespace" or "name"
	external     *externalRef
}

func (c *compiler) parseAssign(f fields, m *mutator, params map[string]any, metadata bool) (assignSource, error) {
	at := paramsPath.Child("assign")
	var src assignSource
	a, err := f.object(params["assign"], at)
	if err != nil {
		return src, err
	}
	if a == nil {
		return src, f.fail(field.Required(at, "give assign.value, assign.fromMetadata or assign.externalData"))
	}
	if err := f.known(a, at, "value", "fromMetadata", "externalData"); err != nil {
		return src, err
	}
	_, hasValue := a["value"]
	set := 0
	for _, k := range []string{"value", "fromMetadata", "externalData"} {
		if _, ok := a[k]; ok {
			set++
		}
	}
	if set != 1 {
		return src, f.fail(field.Invalid(at, field.OmitValueType{}, fmt.Sprintf("%d of value, fromMetadata and externalData are set; give exactly one", set)))
	}
	switch {
	case hasValue:
		src.value = a["value"]
	case a["fromMetadata"] != nil:
		fm, err := f.object(a["fromMetadata"], at.Child("fromMetadata"))
		if err != nil {
			return src, err
		}
		if err := f.known(fm, at.Child("fromMetadata"), "field"); err != nil {
			return src, err
		}
		src.fromMetadata, err = f.str(fm["field"], at.Child("fromMetadata", "field"))
		if err != nil {
			return src, err
		}
		if src.fromMetadata != "namespace" && src.fromMetadata != "name" {
			return src, f.fail(field.NotSupported(at.Child("fromMetadata", "field"), src.fromMetadata, []string{"namespace", "name"}))
		}
	default:
		if metadata {
			return src, f.fail(field.Forbidden(at.Child("externalData"), "AssignMetadata cannot take external data; use an Assign mutator"))
		}
		if src.external, err = c.parseExternal(f, m, a["externalData"]); err != nil {
			return src, err
		}
	}
	return src, nil
}

func (c *compiler) assign(f fields, m *mutator, params map[string]any) error {
	if params == nil {
		return f.fail(field.Required(paramsPath, "give parameters.assign"))
	}
	if err := f.known(params, paramsPath, "assign", "pathTests"); err != nil {
		return err
	}
	src, err := c.parseAssign(f, m, params, false)
	if err != nil {
		return err
	}
	if last := m.loc.Last(); last.Kind == path.List {
		if src.fromMetadata != "" || src.external != nil {
			return f.fail(field.Invalid(paramsPath.Child("assign"), field.OmitValueType{}, "a location ending in a list element needs an object value; give assign.value"))
		}
		obj, ok := src.value.(map[string]any)
		if !ok || !last.KeyMatches(obj[last.Name]) {
			return f.fail(field.Invalid(paramsPath.Child("assign", "value"), policy.Shown(src.value), fmt.Sprintf("the location %s ends in a list element; the value must be an object whose %q is %v", m.loc.String(), last.Name, last.Value)))
		}
	}
	m.external = src.external
	m.set = &assignSetter{src: src}
	return nil
}

func (c *compiler) assignMetadata(f fields, m *mutator, params map[string]any) error {
	if params == nil {
		return f.fail(field.Required(paramsPath, "give parameters.assign"))
	}
	if err := f.known(params, paramsPath, "assign"); err != nil {
		return err
	}
	src, err := c.parseAssign(f, m, params, true)
	if err != nil {
		return err
	}
	if src.fromMetadata == "" {
		if _, ok := src.value.(string); !ok {
			return f.fail(policy.WrongType(paramsPath.Child("assign", "value"), src.value, "a string (labels and annotations are strings)"))
		}
	}
	m.set = &metadataSetter{src: src}
	return nil
}

func (c *compiler) modifySet(f fields, m *mutator, params map[string]any) error {
	at := paramsPath
	if params == nil {
		return f.fail(field.Required(at, "give parameters.values.fromList"))
	}
	if err := f.known(params, at, "operation", "values", "pathTests"); err != nil {
		return err
	}
	op, err := f.str(params["operation"], at.Child("operation"))
	if err != nil {
		return err
	}
	s := &setSetter{}
	switch op {
	case "", "merge":
	case "prune":
		s.prune = true
	default:
		return f.fail(field.NotSupported(at.Child("operation"), op, []string{"merge", "prune"}))
	}
	vals, err := f.object(params["values"], at.Child("values"))
	if err != nil {
		return err
	}
	if err := f.known(vals, at.Child("values"), "fromList"); err != nil {
		return err
	}
	if s.values, err = f.list(vals["fromList"], at.Child("values", "fromList")); err != nil {
		return err
	}
	m.leaf = schemaType{kind: schemaSet}
	m.set = s
	return nil
}

func (c *compiler) assignImage(f fields, m *mutator, params map[string]any) error {
	at := paramsPath
	if params == nil {
		return f.fail(field.Required(at, "give assignDomain, assignPath or assignTag"))
	}
	if err := f.known(params, at, "assignDomain", "assignPath", "assignTag", "pathTests"); err != nil {
		return err
	}
	var p imageParts
	var err error
	for _, x := range []struct {
		key string
		out *string
	}{{"assignDomain", &p.domain}, {"assignPath", &p.path}, {"assignTag", &p.tag}} {
		if *x.out, err = f.str(params[x.key], at.Child(x.key)); err != nil {
			return err
		}
	}
	if fe := p.validate(c.grammar, at); fe != nil {
		return f.fail(fe)
	}
	m.leaf = schemaType{kind: schemaString}
	m.set = &imageSetter{parts: p}
	return nil
}

// assignSetter is Assign: the value at the location becomes the given value.
type assignSetter struct {
	src assignSource
}

func (s *assignSetter) set(e env, cur any, exists bool) (any, bool, error) {
	if s.src.external != nil {
		return s.src.external.placeholder(e, cur, exists)
	}
	v := s.src.value
	if s.src.fromMetadata != "" {
		v = metadataValue(e, s.src.fromMetadata)
	}
	if exists && engine.Equal(cur, v) {
		return cur, false, nil
	}
	return engine.DeepCopy(v), true, nil
}

// metadataSetter is AssignMetadata: it adds a label or annotation and never changes an
// existing one.
type metadataSetter struct {
	src assignSource
}

func (s *metadataSetter) set(e env, cur any, exists bool) (any, bool, error) {
	if exists {
		return cur, false, nil
	}
	if s.src.fromMetadata != "" {
		return metadataValue(e, s.src.fromMetadata), true, nil
	}
	return s.src.value, true, nil
}

func metadataValue(e env, field string) string {
	meta, _ := e.obj["metadata"].(map[string]any)
	s, _ := meta[field].(string)
	if s == "" && field == "namespace" {
		s = e.req.Namespace
	}
	return s
}

// setSetter is ModifySet, as Gatekeeper's (mutators/modifyset, setter): merge appends
// the values missing from the list in order (a missing list becomes fromList as given,
// duplicates included); prune removes every element equal to one of the values. A value
// that is not a list, null included, is an error.
type setSetter struct {
	values []any
	prune  bool
}

func (s *setSetter) set(_ env, cur any, exists bool) (any, bool, error) {
	if !exists {
		if s.prune {
			return nil, false, nil
		}
		return engine.DeepCopy(s.values), true, nil
	}
	l, ok := cur.([]any)
	if !ok {
		return nil, false, fmt.Errorf("expected a list, found %s: it cannot be treated as a set", describe(cur))
	}
	if s.prune {
		if !slices.ContainsFunc(l, s.contains) {
			return cur, false, nil
		}
		out := make([]any, 0, len(l)-1)
		for _, e := range l {
			if !s.contains(e) {
				out = append(out, e)
			}
		}
		return out, true, nil
	}
	var out []any
	for _, v := range s.values {
		if containsValue(l, v) || containsValue(out, v) {
			continue
		}
		out = append(out, engine.DeepCopy(v))
	}
	if len(out) == 0 {
		return cur, false, nil
	}
	return append(slices.Clip(l), out...), true, nil
}

func (s *setSetter) contains(v any) bool { return containsValue(s.values, v) }

func containsValue(l []any, v any) bool {
	for _, e := range l {
		if engine.Equal(e, v) {
			return true
		}
	}
	return false
}
