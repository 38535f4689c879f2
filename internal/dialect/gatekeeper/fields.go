package gatekeeper

import (
	"fmt"
	"strings"

	"github.com/morph-dev/morph/internal/policy"
)

// fields reads a decoded policy document strictly: every error names the field, and a
// field the dialect does not know is an error, so that typos never go unnoticed.
type fields struct {
	doc policy.Document
}

func (f fields) errorf(field, format string, args ...any) error {
	return f.doc.Errorf(field, format, args...)
}

// object reads an optional object; nil when absent.
func (f fields) object(v any, field string) (map[string]any, error) {
	if v == nil {
		return nil, nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, f.errorf(field, "expected an object, found %s", describe(v))
	}
	return m, nil
}

// known rejects keys of m that are not in allowed.
func (f fields) known(m map[string]any, field string, allowed ...string) error {
	if k, ok := policy.UnknownField(m, allowed...); ok {
		return f.errorf(join(field, k), "unknown field: the fields of %s are %s", orRoot(field), strings.Join(allowed, ", "))
	}
	return nil
}

func (f fields) str(v any, field string) (string, error) {
	if v == nil {
		return "", nil
	}
	s, ok := v.(string)
	if !ok {
		return "", f.errorf(field, "expected a string, found %s", describe(v))
	}
	return s, nil
}

func (f fields) strings(v any, field string) ([]string, error) {
	if v == nil {
		return nil, nil
	}
	l, ok := v.([]any)
	if !ok {
		return nil, f.errorf(field, "expected a list of strings, found %s", describe(v))
	}
	out := make([]string, len(l))
	for i, e := range l {
		s, ok := e.(string)
		if !ok {
			return nil, f.errorf(fmt.Sprintf("%s[%d]", field, i), "expected a string, found %s", describe(e))
		}
		out[i] = s
	}
	return out, nil
}

func (f fields) list(v any, field string) ([]any, error) {
	if v == nil {
		return nil, nil
	}
	l, ok := v.([]any)
	if !ok {
		return nil, f.errorf(field, "expected a list, found %s", describe(v))
	}
	return l, nil
}

func join(field, key string) string {
	if field == "" {
		return key
	}
	return field + "." + key
}

func orRoot(field string) string {
	if field == "" {
		return "the document"
	}
	return field
}

func describe(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case map[string]any:
		return "an object"
	case []any:
		return "a list"
	case string:
		return fmt.Sprintf("the string %q", x)
	case bool:
		return fmt.Sprintf("the boolean %v", x)
	case int64, float64, int:
		return fmt.Sprintf("the number %v", x)
	}
	return fmt.Sprintf("%T", v)
}
