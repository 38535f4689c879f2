package katalog

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/morph-dev/morph/internal/engine"
)

// validationRule is one compiled validation rule.
type validationRule struct {
	index    int
	field    Path
	text     string
	min, max *bound
	pattern  *regexp.Regexp
	required bool
	message  string
	deny     bool
}

// bound is a min or max, as a number and as written.
type bound struct {
	value float64
	text  string
}

// Validator checks an entry's validation rules.
//
// A rule checks one field. required fails when the field is absent, null or "". An
// absent or null field fails min (it holds nothing that is at least min: this is why
// spec 000's mutateFirst example needs its default before validation) and passes max
// and pattern. min and max compare numbers and numeric strings (such as "2", which a default without a
// known schema writes) by value, other strings by length in characters, and lists and
// maps by their number of items. pattern (RE2) matches strings, numbers and booleans in
// their printed form. A rule reports at most one violation, with its message or a
// generated one; action deny (the default) refuses the object, warn only warns.
type Validator struct {
	entry *Entry
}

// Validate checks every rule against obj.
func (v *Validator) Validate(_ context.Context, _ *engine.Request, obj map[string]any) ([]engine.Violation, error) {
	var out []engine.Violation
	for _, r := range v.entry.validation {
		if msg := r.check(obj); msg != "" {
			if r.message != "" {
				msg = r.message
			}
			out = append(out, engine.Violation{ID: v.entry.id, Field: r.text, Message: msg, Deny: r.deny})
		}
	}
	return out, nil
}

// check returns the generated message of the first failing check, or "".
func (r *validationRule) check(obj map[string]any) string {
	val, present := r.field.Get(obj)
	if !present || val == nil || val == "" {
		if r.required {
			return r.text + " is required"
		}
		if !present || val == nil {
			if r.min != nil {
				return fmt.Sprintf("%s must be at least %s: it is absent", r.text, r.min.text)
			}
			return ""
		}
	}
	if r.min != nil || r.max != nil {
		n, unit, ok := measure(val)
		if !ok {
			return fmt.Sprintf("%s is %s: min and max apply to numbers, strings and lists", r.text, describe(val))
		}
		if r.min != nil && n < r.min.value {
			return fmt.Sprintf("%s must be at least %s%s", r.text, r.min.text, unit)
		}
		if r.max != nil && n > r.max.value {
			return fmt.Sprintf("%s must be at most %s%s", r.text, r.max.text, unit)
		}
	}
	if r.pattern != nil {
		switch val.(type) {
		case map[string]any, []any:
			return fmt.Sprintf("%s is %s: pattern applies to strings", r.text, describe(val))
		}
		if !r.pattern.MatchString(printed(val)) {
			return fmt.Sprintf("%s must match the pattern %s", r.text, strconv.Quote(r.pattern.String()))
		}
	}
	return ""
}

// measure is what min and max compare, with the unit for messages.
func measure(v any) (float64, string, bool) {
	switch x := v.(type) {
	case int64:
		return float64(x), "", true
	case float64:
		return x, "", true
	case string:
		if _, f, _, err := numberOf(x); err == nil && strings.TrimSpace(x) != "" {
			return f, "", true
		}
		return float64(utf8.RuneCountInString(x)), " characters", true
	case []any:
		return float64(len(x)), " items", true
	case map[string]any:
		return float64(len(x)), " keys", true
	}
	return 0, "", false
}
