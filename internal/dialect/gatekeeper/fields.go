package gatekeeper

import (
	"fmt"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/morph-dev/morph/internal/policy"
)

// fields reads a decoded policy document strictly: every error is a field.Error of the
// document (policy.Error), and a field the dialect does not know is an error, so that
// typos never go unnoticed.
type fields struct {
	doc policy.Document
}

// fail returns the field errors as an error of the document.
func (f fields) fail(errs ...*field.Error) error { return f.doc.Err(errs...) }

// object reads an optional object; nil when absent.
func (f fields) object(v any, at *field.Path) (map[string]any, error) {
	if v == nil {
		return nil, nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, f.fail(policy.WrongType(at, v, "an object"))
	}
	return m, nil
}

// known rejects keys of m that are not in allowed; at is nil for the document itself.
func (f fields) known(m map[string]any, at *field.Path, allowed ...string) error {
	if fe := policy.CheckKnown(m, at, allowed...); fe != nil {
		return f.fail(fe)
	}
	return nil
}

func (f fields) str(v any, at *field.Path) (string, error) {
	if v == nil {
		return "", nil
	}
	s, ok := v.(string)
	if !ok {
		return "", f.fail(policy.WrongType(at, v, "a string"))
	}
	return s, nil
}

func (f fields) strings(v any, at *field.Path) ([]string, error) {
	if v == nil {
		return nil, nil
	}
	l, ok := v.([]any)
	if !ok {
		return nil, f.fail(policy.WrongType(at, v, "a list of strings"))
	}
	out := make([]string, len(l))
	for i, e := range l {
		s, ok := e.(string)
		if !ok {
			return nil, f.fail(policy.WrongType(at.Index(i), e, "a string"))
		}
		out[i] = s
	}
	return out, nil
}

func (f fields) list(v any, at *field.Path) ([]any, error) {
	if v == nil {
		return nil, nil
	}
	l, ok := v.([]any)
	if !ok {
		return nil, f.fail(policy.WrongType(at, v, "a list"))
	}
	return l, nil
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
