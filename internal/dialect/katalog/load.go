package katalog

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"text/template"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/morph-dev/morph/internal/engine"
	"github.com/morph-dev/morph/internal/objects"
	"github.com/morph-dev/morph/internal/policy"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// The documents this dialect compiles.
const (
	APIVersion  = "orkestra.orkspace.io/v1"
	Kind        = "Katalog"
	DialectName = "katalog"
	// OrderAnnotation on a Katalog's metadata places its entries in the engine's order.
	OrderAnnotation = policy.OrderAnnotation
)

// Options configures the dialect.
type Options struct {
	// Objects holds context objects. The CustomResourceDefinitions among them give the
	// schemas that turn template results (strings) into the field's type: integer to
	// int64, number to int64 or float64, boolean to bool. May be nil: values then stay
	// strings, as spec 000's patch examples show ("2").
	Objects *objects.Store
	// Budget bounds each evaluation of a template (a default, override or conversion
	// value); zero fields take DefaultSteps and DefaultBytes.
	Budget Budget
}

// Dialect compiles Katalogs. Create it with New.
type Dialect struct {
	opts Options
}

// New returns the Katalog dialect.
func New(opts Options) policy.Dialect { return &Dialect{opts: opts} }

// Name is "katalog".
func (d *Dialect) Name() string { return DialectName }

// Handles reports whether the document is a Katalog.
func (d *Dialect) Handles(apiVersion, kind string) bool {
	return apiVersion == APIVersion && kind == Kind
}

// Compile compiles every entry of every Katalog. Entries are independent: a rejected
// entry is reported in the joined error and its siblings still compile. Conversion
// paths of all entries of one group and kind form one Converter.
func (d *Dialect) Compile(docs []policy.Document) (*policy.Bundle, error) {
	_, b, err := d.CompileEntries(docs)
	return b, err
}

// CompileEntries is Compile that also returns the entries behind the bundle's mutators,
// validators and converters, each once, ordered by Katalog and entry name (entries that
// compiled to nothing are not listed).
func (d *Dialect) CompileEntries(docs []policy.Document) ([]*Entry, *policy.Bundle, error) {
	c := &compiler{opts: d.opts, funcs: Funcs(), bundle: &policy.Bundle{}}
	var entries, used []*Entry
	for _, doc := range docs {
		entries = append(entries, c.document(doc)...)
	}
	for _, e := range entries {
		if len(e.rules) > 0 {
			c.bundle.Mutators = append(c.bundle.Mutators, (&Mutator{entry: e}).compiled())
		}
		if len(e.validation) > 0 {
			c.bundle.Validators = append(c.bundle.Validators, (&Validator{entry: e}).compiled())
		}
		if len(e.rules) > 0 || len(e.validation) > 0 || e.Conversion != nil {
			used = append(used, e)
		}
	}
	c.converters(entries)
	slices.SortFunc(used, func(a, b *Entry) int { return a.id.Compare(b.id) })
	return used, c.bundle, errors.Join(c.errs...)
}

// compiler holds the state of one Compile call.
type compiler struct {
	opts   Options
	funcs  template.FuncMap
	bundle *policy.Bundle
	errs   []error
}

func (c *compiler) warn(doc policy.Document, field, format string, args ...any) {
	c.bundle.Warnings = append(c.bundle.Warnings, doc.Where()+": "+field+": "+fmt.Sprintf(format, args...))
}

// document compiles one Katalog and returns the entries that compiled.
func (c *compiler) document(doc policy.Document) []*Entry {
	if err := checkKeys(doc.Object, "apiVersion", "kind", "metadata", "spec", "status"); err != nil {
		c.errs = append(c.errs, locate(doc, "", err))
		return nil
	}
	order, err := doc.Order()
	if err != nil {
		c.errs = append(c.errs, err)
		return nil
	}
	if doc.Name() == "" {
		c.errs = append(c.errs, doc.Err(field.Required(field.NewPath("metadata", "name"), "a Katalog needs a name; give one")))
		return nil
	}
	spec, ok := doc.Object["spec"].(map[string]any)
	if !ok {
		c.errs = append(c.errs, doc.Err(policy.WrongType(field.NewPath("spec"), doc.Object["spec"], "an object (a Katalog needs a spec with crds)")))
		return nil
	}
	if err := checkKeys(spec, "crds"); err != nil {
		c.errs = append(c.errs, locate(doc, "spec", err))
		return nil
	}
	raws, err := entryList(spec["crds"])
	if err != nil {
		c.errs = append(c.errs, locate(doc, "spec.crds", err))
		return nil
	}
	var out []*Entry
	seen := map[string]string{}
	for _, r := range raws {
		if prev, dup := seen[r.name]; dup && r.name != "" {
			c.errs = append(c.errs, doc.Err(policy.Duplicate(rel(r.field).Child("name"), r.name, fmt.Sprintf("the entry is declared twice (first at %s); entry names must be unique", prev))))
			continue
		}
		seen[r.name] = r.field
		e := &Entry{Katalog: doc.Name(), Name: r.name, doc: doc, field: r.field, budget: c.opts.Budget.withDefaults()}
		e.id = engine.ID{Order: order, Dialect: DialectName, Kind: Kind, Namespace: doc.Namespace(), Name: doc.Name(), Part: r.name}
		if err := c.entry(e, r.object); err != nil {
			fe := at(r.field, err)
			if r.listed { // the field does not show the entry's name
				fe.Detail = fmt.Sprintf("entry %q: %s", r.name, fe.Detail)
			}
			c.errs = append(c.errs, doc.Err(fe))
			continue
		}
		out = append(out, e)
	}
	return out
}

// rawEntry is an entry before compilation, with its location.
type rawEntry struct {
	name   string
	field  string
	listed bool // from the list form, where the field does not show the name
	object map[string]any
}

// entryList accepts spec.crds as a map keyed by entry name or as a list of entries
// with a name.
func entryList(v any) ([]rawEntry, error) {
	switch x := v.(type) {
	case map[string]any:
		names := slices.Sorted(maps.Keys(x))
		out := make([]rawEntry, 0, len(names))
		for _, n := range names {
			loc := Path{"spec", "crds", n}.String()
			m, ok := x[n].(map[string]any)
			if !ok {
				return nil, policy.WrongType(rel(n), x[n], "an object (an entry)")
			}
			if name, ok := m["name"]; ok && name != n {
				return nil, field.Invalid(rel(n).Child("name"), policy.Shown(name), fmt.Sprintf("differs from the entry's key %q; drop name or make them equal", n))
			}
			out = append(out, rawEntry{name: n, field: loc, object: m})
		}
		return out, nil
	case []any:
		out := make([]rawEntry, 0, len(x))
		for i, it := range x {
			loc := fmt.Sprintf("spec.crds[%d]", i)
			m, ok := it.(map[string]any)
			if !ok {
				return nil, policy.WrongType(rel("").Index(i), it, "an object (an entry)")
			}
			name, _ := m["name"].(string)
			if name == "" {
				return nil, field.Required(rel("").Index(i).Child("name"), "a listed entry needs a name; give one")
			}
			out = append(out, rawEntry{name: name, field: loc, listed: true, object: m})
		}
		return out, nil
	case nil:
		return nil, field.Required(rel(""), "no entries; give a map of entries keyed by name, or a list of entries with name")
	}
	return nil, policy.WrongType(rel(""), v, "a map of entries keyed by name or a list of entries")
}

// checkKeys rejects keys outside allowed, naming the first unknown key in sorted order.
func checkKeys(m map[string]any, allowed ...string) error {
	if k, ok := policy.UnknownField(m, allowed...); ok {
		return policy.Unknown(nil, k, allowed...)
	}
	return nil
}

func asMap(v any, what string) (map[string]any, error) {
	switch x := v.(type) {
	case map[string]any:
		return x, nil
	case nil:
		return nil, nil
	}
	return nil, policy.WrongType(rel(what), v, "an object")
}

func asList(v any, what string) ([]any, error) {
	switch x := v.(type) {
	case []any:
		return x, nil
	case nil:
		return nil, nil
	}
	return nil, policy.WrongType(rel(what), v, "a list")
}

func asString(m map[string]any, key string) (string, error) {
	switch x := m[key].(type) {
	case string:
		return x, nil
	case nil:
		return "", nil
	default:
		return "", policy.WrongType(rel(key), x, "a string")
	}
}

func asBool(m map[string]any, key string) (value, set bool, err error) {
	switch x := m[key].(type) {
	case bool:
		return x, true, nil
	case nil:
		return false, false, nil
	default:
		return false, false, policy.WrongType(rel(key), x, "true or false")
	}
}

// entry compiles one CRD entry into e.
func (c *compiler) entry(e *Entry, m map[string]any) error {
	if err := checkKeys(m, "name", "apiTypes", "webhooks", "operatorBox", "reconciler", "validation", "conversion"); err != nil {
		return err
	}
	if err := c.apiTypes(e, m["apiTypes"]); err != nil {
		return at("apiTypes", err)
	}
	boxKey := "operatorBox"
	if _, ok := m["reconciler"]; ok {
		if _, both := m["operatorBox"]; both {
			return field.Forbidden(rel("reconciler"), "operatorBox and reconciler are two names of one field; keep one")
		}
		boxKey = "reconciler"
	}
	box, err := asMap(m[boxKey], boxKey)
	if err != nil {
		return err
	}
	if err := c.operatorBox(e, boxKey, box); err != nil {
		return err
	}
	if v, ok := m["validation"]; ok {
		if len(e.validation) > 0 {
			return field.Forbidden(rel("validation"), fmt.Sprintf("validation rules are declared both here and in %s.validation; keep one list", boxKey))
		}
		if e.validation, err = c.validationRules(e, v); err != nil {
			return at("validation", err)
		}
	}
	if err := c.webhooks(e, m["webhooks"]); err != nil {
		return at("webhooks", err)
	}
	if v, ok := m["conversion"]; ok {
		if err := c.conversion(e, v); err != nil {
			return at("conversion", err)
		}
	}
	return nil
}

func (c *compiler) apiTypes(e *Entry, v any) error {
	m, err := asMap(v, "apiTypes")
	if err != nil {
		return err
	}
	if m == nil {
		return field.Required(rel(""), "give group, version, kind and plural of the custom resource")
	}
	if err := checkKeys(m, "group", "version", "kind", "plural"); err != nil {
		return err
	}
	t := &e.APITypes
	for _, f := range []struct {
		key string
		dst *string
	}{{"group", &t.Group}, {"version", &t.Version}, {"kind", &t.Kind}, {"plural", &t.Plural}} {
		if *f.dst, err = asString(m, f.key); err != nil {
			return err
		}
	}
	if t.Version == "" {
		return field.Required(rel("version"), "give the version and kind of the custom resource")
	}
	if t.Kind == "" {
		return field.Required(rel("kind"), "give the version and kind of the custom resource")
	}
	if t.Plural == "" {
		plural, _ := meta.UnsafeGuessKindToResource(schema.GroupVersionKind{Group: t.Group, Version: t.Version, Kind: t.Kind})
		t.Plural = plural.Resource
	}
	return nil
}

func (c *compiler) webhooks(e *Entry, v any) error {
	m, err := asMap(v, "webhooks")
	if err != nil {
		return err
	}
	if err := checkKeys(m, "mutation", "validation", "operations"); err != nil {
		return err
	}
	e.Webhook.Mutation = len(e.rules) > 0
	if b, set, err := asBool(m, "mutation"); err != nil {
		return err
	} else if set {
		e.Webhook.Mutation = b
	}
	e.Webhook.Validation = len(e.validation) > 0
	if b, set, err := asBool(m, "validation"); err != nil {
		return err
	} else if set {
		e.Webhook.Validation = b
	}
	ops := []string{string(engine.Create), string(engine.Update)}
	if raw, ok := m["operations"]; ok {
		l, err := asList(raw, "operations")
		if err != nil {
			return err
		}
		if len(l) == 0 {
			return field.Required(rel("operations"), "the list is empty; give CREATE, UPDATE or both, or drop the field for both")
		}
		ops = ops[:0]
		for i, o := range l {
			s, ok := o.(string)
			if !ok {
				return policy.WrongType(rel("operations").Index(i), o, "a string")
			}
			ops = append(ops, s)
		}
	}
	set, err := engine.OperationsOf(ops...)
	if err != nil {
		return at("operations", err)
	}
	e.operations = set
	for _, op := range []engine.Operation{engine.Create, engine.Update, engine.Delete, engine.Connect} {
		if set.Has(op) {
			e.Webhook.Operations = append(e.Webhook.Operations, op)
		}
	}
	return nil
}

// operatorBox reads mutation (a list of rules, or {rules, mutateFirst}), mutateFirst
// and validation.
func (c *compiler) operatorBox(e *Entry, key string, box map[string]any) error {
	if box == nil {
		return nil
	}
	if err := checkKeys(box, "mutation", "mutateFirst", "validation"); err != nil {
		return at(key, err)
	}
	mutateFirst, firstSet, err := asBool(box, "mutateFirst")
	if err != nil {
		return at(key, err)
	}
	rulesField := key + ".mutation"
	var rules any
	switch x := box["mutation"].(type) {
	case []any, nil:
		rules = x
	case map[string]any:
		if err := checkKeys(x, "rules", "mutateFirst"); err != nil {
			return at(rulesField, err)
		}
		inner, innerSet, err := asBool(x, "mutateFirst")
		if err != nil {
			return at(rulesField, err)
		}
		if innerSet && firstSet && inner != mutateFirst {
			return field.Invalid(rel(rulesField).Child("mutateFirst"), inner, fmt.Sprintf("%s.mutateFirst is %t; keep one", key, mutateFirst))
		}
		if innerSet {
			mutateFirst = inner
		}
		rules = x["rules"]
		rulesField += ".rules"
	default:
		return policy.WrongType(rel(rulesField), x, "a list of rules or {rules, mutateFirst}")
	}
	e.MutateFirst = mutateFirst
	list, err := asList(rules, rulesField)
	if err != nil {
		return err
	}
	for i, r := range list {
		rl, err := c.rule(e, i, r)
		if err != nil {
			return at(fmt.Sprintf("%s[%d]", rulesField, i), err)
		}
		if rl != nil {
			e.rules = append(e.rules, rl)
		} else {
			c.warn(e.doc, fmt.Sprintf("%s.%s[%d]", e.field, rulesField, i), "the rule for field %q declares neither default nor override: it does nothing", printed(r.(map[string]any)["field"]))
		}
	}
	if v, ok := box["validation"]; ok {
		if e.validation, err = c.validationRules(e, v); err != nil {
			return at(key+".validation", err)
		}
	}
	return nil
}

// rule compiles one mutation rule; a rule with neither default nor override gives nil.
func (c *compiler) rule(e *Entry, i int, v any) (*rule, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return nil, policy.WrongType(rel(""), v, "an object with field and default or override (a rule)")
	}
	if err := checkKeys(m, "field", "default", "override"); err != nil {
		return nil, err
	}
	text, err := asString(m, "field")
	if err != nil {
		return nil, err
	}
	if text == "" {
		return nil, field.Required(rel("field"), "give the dot-notation path of the field to set, such as spec.replicas")
	}
	path, err := ParsePath(text)
	if err != nil {
		return nil, invalid(rel("field"), text, err)
	}
	action := "override"
	raw, ok := m["override"]
	if !ok {
		action = "default"
		if raw, ok = m["default"]; !ok {
			return nil, nil
		}
	}
	val, err := compileValue(text, raw, c.funcs)
	if err != nil {
		return nil, invalid(rel(action), raw, fmt.Errorf("for field %q: %w", text, err))
	}
	return &rule{index: i, field: path, text: text, action: action, value: val, typ: c.schemaType(e.APITypes, e.APITypes.Version, path)}, nil
}

// schemaType is the openAPIV3Schema type of a field of the entry's custom resource at
// a version, from the context CRD, or "" when unknown.
func (c *compiler) schemaType(t APITypes, version string, p Path) string {
	if c.opts.Objects == nil {
		return ""
	}
	crd, ok := c.opts.Objects.CRD(t.Group, t.Kind)
	if !ok {
		return ""
	}
	return schemaType(crd, version, p)
}

func (c *compiler) validationRules(e *Entry, v any) ([]*validationRule, error) {
	list, err := asList(v, "")
	if err != nil {
		return nil, err
	}
	var out []*validationRule
	for i, r := range list {
		vr, err := compileValidationRule(i, r)
		if err != nil {
			return nil, at(fmt.Sprintf("[%d]", i), err)
		}
		out = append(out, vr)
	}
	return out, nil
}

func compileValidationRule(i int, v any) (*validationRule, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return nil, policy.WrongType(rel(""), v, "an object (a validation rule)")
	}
	if err := checkKeys(m, "field", "min", "max", "pattern", "required", "message", "action"); err != nil {
		return nil, err
	}
	r := &validationRule{index: i, deny: true}
	var err error
	if r.text, err = asString(m, "field"); err != nil {
		return nil, err
	}
	if r.text == "" {
		return nil, field.Required(rel("field"), "give the dot-notation path of the field to check")
	}
	if r.field, err = ParsePath(r.text); err != nil {
		return nil, invalid(rel("field"), r.text, err)
	}
	for _, b := range []struct {
		key string
		dst **bound
	}{{"min", &r.min}, {"max", &r.max}} {
		raw, ok := m[b.key]
		if !ok {
			continue
		}
		_, f, _, err := numberOf(raw)
		if err != nil {
			return nil, invalid(rel(b.key), raw, err)
		}
		*b.dst = &bound{value: f, text: printed(raw)}
	}
	if r.min != nil && r.max != nil && r.min.value > r.max.value {
		return nil, field.Invalid(rel("min"), m["min"], fmt.Sprintf("above max %s; give a min at most max", r.max.text))
	}
	pattern, err := asString(m, "pattern")
	if err != nil {
		return nil, err
	}
	if pattern != "" {
		if r.pattern, err = regexp.Compile(pattern); err != nil {
			return nil, invalid(rel("pattern"), pattern, err)
		}
	}
	if r.required, _, err = asBool(m, "required"); err != nil {
		return nil, err
	}
	if r.message, err = asString(m, "message"); err != nil {
		return nil, err
	}
	action, err := asString(m, "action")
	if err != nil {
		return nil, err
	}
	switch strings.ToLower(action) {
	case "", "deny":
	case "warn":
		r.deny = false
	default:
		return nil, field.NotSupported(rel("action"), action, []string{"deny", "warn"})
	}
	if r.min == nil && r.max == nil && r.pattern == nil && !r.required {
		return nil, field.Required(rel(""), "the rule checks nothing; give min, max, pattern or required")
	}
	return r, nil
}

func (c *compiler) conversion(e *Entry, v any) error {
	m, err := asMap(v, "conversion")
	if err != nil {
		return err
	}
	if err := checkKeys(m, "storageVersion", "updateCRD", "paths", "participant"); err != nil {
		return err
	}
	conv := &Conversion{}
	if conv.StorageVersion, err = asString(m, "storageVersion"); err != nil {
		return err
	}
	if conv.UpdateCRD, _, err = asBool(m, "updateCRD"); err != nil {
		return err
	}
	if conv.Participant, _, err = asBool(m, "participant"); err != nil {
		return err
	}
	list, err := asList(m["paths"], "paths")
	if err != nil {
		return err
	}
	seen := map[[2]string]int{}
	for i, raw := range list {
		p, err := c.conversionPath(e, raw)
		if err != nil {
			return at(fmt.Sprintf("paths[%d]", i), err)
		}
		key := [2]string{p.From, p.To}
		if j, dup := seen[key]; dup {
			return policy.Duplicate(rel("paths").Index(i), p.From+" to "+p.To, fmt.Sprintf("already declared at paths[%d]; keep one", j))
		}
		seen[key] = i
		conv.Paths = append(conv.Paths, p)
	}
	if len(conv.Paths) == 0 && !conv.Participant {
		return field.Required(rel("paths"), "no paths; declare paths (from, to, spec), or participant: true when another entry of the same kind owns them")
	}
	e.Conversion = conv
	e.stats = &ConversionStats{}
	return nil
}

func (c *compiler) conversionPath(e *Entry, v any) (*ConversionPath, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return nil, policy.WrongType(rel(""), v, "an object with from, to and spec (a path)")
	}
	if err := checkKeys(m, "from", "to", "spec"); err != nil {
		return nil, err
	}
	p := &ConversionPath{}
	var err error
	if p.From, err = asString(m, "from"); err != nil {
		return nil, err
	}
	if p.To, err = asString(m, "to"); err != nil {
		return nil, err
	}
	if p.From == "" || p.To == "" || p.From == p.To {
		return nil, field.Invalid(rel("to"), p.To, fmt.Sprintf("from is %q; from and to must name two different versions", p.From))
	}
	spec, err := asMap(m["spec"], "spec")
	if err != nil {
		return nil, err
	}
	for _, k := range slices.Sorted(maps.Keys(spec)) {
		sub, err := ParsePath(k)
		if err != nil {
			return nil, invalid(rel("spec").Key(k), k, err)
		}
		full := append(Path{"spec"}, sub...)
		val, err := compileValue(full.String(), spec[k], c.funcs)
		if err != nil {
			return nil, invalid(rel("spec."+sub.String()), spec[k], err)
		}
		p.fields = append(p.fields, &pathField{field: full, value: val, typ: c.schemaType(e.APITypes, p.To, full)})
	}
	return p, nil
}

// Compile errors are field.Errors whose Field is relative to the caller's field while
// they travel up (rel builds one); at prefixes the parent field, so that the entry
// receives the error at the full path of the document.

// rel is a path relative to the caller's field: "" for the field itself (printed "[]"
// until at re-roots it).
func rel(name string) *field.Path { return field.NewPath(name) }

// invalid is the error of a value that did not parse: its text is the detail.
func invalid(path *field.Path, value any, err error) *field.Error {
	return field.Invalid(path, policy.Shown(value), err.Error())
}

// at locates err at parent: a field.Error (relative to parent) is re-rooted there, any
// other error becomes the detail of an invalid value at parent.
func at(parent string, err error) *field.Error {
	fe, ok := err.(*field.Error) //nolint:errorlint // only a field.Error itself is re-rooted
	if !ok {
		return field.Invalid(rel(parent), field.OmitValueType{}, err.Error())
	}
	out := *fe
	// rel("") prints "[]" (a field.Path has no empty form): drop it.
	out.Field = joinField(parent, strings.TrimPrefix(strings.TrimPrefix(fe.Field, "[]"), "."))
	return &out
}

func joinField(parent, child string) string {
	switch {
	case parent == "":
		return child
	case child == "":
		return parent
	case strings.HasPrefix(child, "["):
		return parent + child
	}
	return parent + "." + child
}

// locate turns err, found below base, into an error of the document at its full field.
func locate(doc policy.Document, base string, err error) error {
	return doc.Err(at(base, err))
}
