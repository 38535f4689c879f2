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

// Mutate applies the rules in declaration order, each seeing the result of the ones
// before it. A default applies when the field is absent, null, "", {} or []; an override
// always applies; a rule whose value equals the current one changes nothing.
//
// Templates run under the entry's budget, whose bytes are at most what the request's
// write budget has left (engine.Writer.Remaining), and each value stored is charged to
// it (engine.Writer.ChargeValue). When it changed something it notes the reconcile-time event of spec 000
// (DefaultsAppliedMessage).
func (m *Mutator) Mutate(ctx context.Context, _ *engine.Request, obj map[string]any, w *engine.Writer) (map[string]any, error) {
	var applied []FieldValue
	for _, r := range m.entry.rules {
		cur, present := r.field.Get(obj)
		if r.action == "default" && present && !isEmpty(cur) {
			continue
		}
		budget := m.entry.budget
		budget.Bytes = max(min(budget.Bytes, w.Remaining()), 1)
		v, err := r.value.Eval(ctx, obj, budget)
		if err == nil {
			// Every value stored is charged, a rendered string and a subtree a
			// reference copies alike, before it is copied.
			err = w.ChargeValue(v)
		}
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
		applied = setField(applied, r.text, v)
	}
	if text := DefaultsAppliedMessage(applied); text != "" {
		w.Note(engine.Note{Kind: engine.NoteEvent, Reason: m.entry.EventReason(), Message: text})
	}
	return obj, nil
}

// setField records a field's new value, once per field, in the order first set.
func setField(fields []FieldValue, field string, v any) []FieldValue {
	for i := range fields {
		if fields[i].Field == field {
			fields[i].Value = v
			return fields
		}
	}
	return append(fields, FieldValue{Field: field, Value: v})
}

// FieldValue is a field and the value a rule gave it.
type FieldValue struct {
	Field string
	Value any
}

// DefaultsAppliedMessage renders spec 000's event text, which the mutator notes
// (engine.NoteEvent with the entry's EventReason) for every object it changed. It lists
// every field the entry's rules changed (defaults and overrides), in rule order, with the
// value the rule gave it as JSON: `defaults applied:
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

// ownCopy deep-copies maps and lists, so that a value set at one field never aliases
// another; scalars are returned as they are.
func ownCopy(v any) any {
	switch v.(type) {
	case map[string]any, []any:
		return engine.DeepCopy(v)
	}
	return v
}
