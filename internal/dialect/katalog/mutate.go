package katalog

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/morph-dev/morph/internal/engine"
)

// rule is one compiled mutation rule.
type rule struct {
	index  int
	field  Path
	text   string // the field as written
	action string // "default" or "override"
	value  *Value
	typ    string // the field's schema type, "" when unknown
}

// Mutator applies an entry's mutation rules. It never blocks admission: it runs once
// (ReinvokeNever) and its errors are ignored by the engine (FailIgnore), which drops
// all of its changes and warns.
type Mutator struct {
	entry *Entry
}

// Entry returns the entry the mutator was compiled from.
func (m *Mutator) Entry() *Entry { return m.entry }

func (m *Mutator) entries() []*Entry { return []*Entry{m.entry} }

// ID is {katalog, Katalog, <katalog name>, <entry name>}.
func (m *Mutator) ID() engine.ID { return m.entry.id }

// Targets is the entry's group/version/kind with its webhook operations.
func (m *Mutator) Targets() []engine.Target {
	t := m.entry.APITypes
	return []engine.Target{{Group: t.Group, Version: t.Version, Kind: t.Kind, Operations: m.entry.operations}}
}

// Reinvocation is ReinvokeNever: Katalog rules apply once, in order.
func (m *Mutator) Reinvocation() engine.Reinvocation { return engine.ReinvokeNever }

// FailurePolicy is FailIgnore: Katalog mutation never blocks admission.
func (m *Mutator) FailurePolicy() engine.FailurePolicy { return engine.FailIgnore }

// Matches is true for every object the targets name.
func (m *Mutator) Matches(context.Context, *engine.Request, map[string]any) (bool, error) {
	return true, nil
}

// Mutate applies the rules in declaration order, each seeing the result of the ones
// before it. A default applies when the field is absent, null, "", {} or []; an override
// always applies; a rule whose value equals the current one changes nothing.
func (m *Mutator) Mutate(ctx context.Context, _ *engine.Request, obj map[string]any, w *engine.Writer) (map[string]any, error) {
	for _, r := range m.entry.rules {
		cur, present := r.field.Get(obj)
		if r.action == "default" && present && !isEmpty(cur) {
			continue
		}
		v, err := r.value.Eval(ctx, obj, m.entry.budget)
		if err != nil {
			return nil, fmt.Errorf("mutation rule %s for field %q: resolving template %q: %w", r.action, r.text, r.value.raw, err)
		}
		if v, err = convertToType(v, r.typ); err != nil {
			return nil, fmt.Errorf("mutation rule %s for field %q: %w", r.action, r.text, err)
		}
		if present && engine.Equal(cur, v) {
			continue
		}
		// A typed map or list may be shared with obj, even with a container this
		// invocation owns and a later rule writes through: store a copy.
		next, err := r.field.set(obj, ownCopy(v), w)
		if err != nil {
			return nil, fmt.Errorf("mutation rule %s for field %q: %w", r.action, r.text, err)
		}
		obj = next
		w.Changed(r.field.Pointer())
	}
	return obj, nil
}

// Event is the message of the reconcile-time event for what this mutator changed in a
// result (spec 000): `defaults applied: spec.replicas="2", spec.logLevel="info"`. It
// lists every field the entry's rules changed (defaults and overrides), in rule order,
// with its final value as JSON. It is "" when the mutator changed nothing.
func (m *Mutator) Event(res *engine.Result) string {
	changed := map[string]bool{}
	for _, c := range res.Trace {
		if c.ID == m.entry.id {
			for _, p := range c.Paths {
				changed[p] = true
			}
		}
	}
	var fields []FieldValue
	for _, r := range m.entry.rules {
		ptr := r.field.Pointer()
		if !changed[ptr] {
			continue
		}
		delete(changed, ptr)
		v, _ := r.field.Get(res.Object)
		fields = append(fields, FieldValue{Field: r.text, Value: v})
	}
	return DefaultsAppliedMessage(fields)
}

// FieldValue is a field and the value a rule gave it.
type FieldValue struct {
	Field string
	Value any
}

// DefaultsAppliedMessage renders spec 000's event text: `defaults applied:
// spec.replicas="2", spec.logLevel="info"`; "" for no fields.
func DefaultsAppliedMessage(fields []FieldValue) string {
	if len(fields) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("defaults applied: ")
	for i, f := range fields {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(f.Field)
		b.WriteByte('=')
		v, err := json.Marshal(f.Value)
		if err != nil {
			v = []byte(strconv.Quote(fmt.Sprint(f.Value)))
		}
		b.Write(v)
	}
	return b.String()
}

// AdmissionErrorLog renders spec 000's log line for a mutation that failed at
// admission, which is then allowed without mutation:
//
//	admission/mutate: error applying rules — allowing without mutation kind=Website name=my-site err="mutation rule override for field \"spec.image\": ..."
func AdmissionErrorLog(kind, name string, err error) string {
	msg := "<nil>"
	if err != nil {
		msg = err.Error()
	}
	return fmt.Sprintf("admission/mutate: error applying rules — allowing without mutation kind=%s name=%s err=%s", kind, name, strconv.Quote(msg))
}

// MutateFirst reports the entry's reconcile-time order (see Entry.MutateFirst).
func (m *Mutator) MutateFirst() bool { return m.entry.MutateFirst }

// ownCopy deep-copies maps and lists, so that a value set at one field never aliases
// another; scalars are returned as they are.
func ownCopy(v any) any {
	switch v.(type) {
	case map[string]any, []any:
		return engine.DeepCopy(v)
	}
	return v
}
