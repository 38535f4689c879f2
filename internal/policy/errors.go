package policy

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Error is what is wrong with one document: field errors in the API server's own terms
// (k8s.io/apimachinery's field.Error, as kubectl prints them), each on a line of its own
// after the document's location:
//
//	policies/pull.yaml: document 2 (Assign "always-pull"): spec.location: Invalid value: "spec..x": unexpected "." at column 6; write a path such as spec.containers[name: *].image
//
// One wording for every dialect: the detail says what is wrong, then after "; " what to
// do. Every error a dialect's Compile returns for a document is an *Error; errors.As
// finds the *field.Error underneath.
type Error struct {
	Doc    Document
	Fields field.ErrorList
}

func (e *Error) Error() string {
	where := e.Doc.Where()
	if len(e.Fields) == 0 {
		return where + ": invalid"
	}
	lines := make([]string, len(e.Fields))
	for i, fe := range e.Fields {
		if fe.Field == "" { // the document as a whole
			lines[i] = where + ": " + fe.ErrorBody()
			continue
		}
		lines[i] = where + ": " + fe.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap returns the field errors, so that errors.As finds a *field.Error.
func (e *Error) Unwrap() []error {
	out := make([]error, len(e.Fields))
	for i, fe := range e.Fields {
		out[i] = fe
	}
	return out
}

// Err returns the field errors as an error of this document, nil when there are none.
func (d Document) Err(errs ...*field.Error) error {
	if len(errs) == 0 {
		return nil
	}
	return &Error{Doc: d, Fields: errs}
}

// Wrap locates err, found reading the value at path (nil: the document as a whole), at
// that field of the document. A *field.Error or *Error is kept as it is; any other
// error becomes its detail:
// `spec.location: Invalid value: "spec..x": unexpected "." at column 6`.
func (d Document) Wrap(path *field.Path, value any, err error) error {
	if err == nil {
		return nil
	}
	var pe *Error
	if errors.As(err, &pe) {
		return err
	}
	var fe *field.Error
	if errors.As(err, &fe) {
		return d.Err(fe)
	}
	if path == nil {
		return d.Err(wholeDocument(field.Invalid(field.NewPath("document"), Shown(value), err.Error())))
	}
	return d.Err(field.Invalid(path, Shown(value), err.Error()))
}

// wholeDocument makes fe an error of the document as a whole: no field is printed (a
// field.Path cannot be empty: field.NewPath("") prints "[]").
func wholeDocument(fe *field.Error) *field.Error {
	fe.Field = ""
	return fe
}

// JoinDocuments joins errors as errors.Join does (flattening joined errors), but merges
// the *Error values of one document into one, its field.ErrorList in the order found,
// so that a document's problems print together.
func JoinDocuments(errs ...error) error {
	var out []error
	byDoc := map[docKey]*Error{}
	for _, err := range Errors(errors.Join(errs...)) {
		if err == nil {
			continue
		}
		var pe *Error
		if !errors.As(err, &pe) || pe != err { //nolint:errorlint // only an *Error itself is merged
			out = append(out, err)
			continue
		}
		k := docKey{pe.Doc.File, pe.Doc.Index, pe.Doc.Kind(), pe.Doc.Name()}
		if prev, ok := byDoc[k]; ok {
			prev.Fields = append(prev.Fields, pe.Fields...)
			continue
		}
		merged := &Error{Doc: pe.Doc, Fields: slices.Clone(pe.Fields)}
		byDoc[k] = merged
		out = append(out, merged)
	}
	return errors.Join(out...)
}

type docKey struct {
	file        string
	index       int
	kind, named string
}

// Shown is the value a field error prints: scalars as they are, objects and lists
// left out (field.OmitValueType), since a whole subtree on one line helps nobody.
func Shown(v any) any {
	switch v.(type) {
	case string, bool, int64, float64, int, int32, float32:
		return v
	}
	return field.OmitValueType{}
}

// WrongType is the error for a value of the wrong JSON type:
// `spec.match: Invalid value: "x": expected an object, found a string`.
func WrongType(path *field.Path, v any, want string) *field.Error {
	return field.TypeInvalid(path, Shown(v), fmt.Sprintf("expected %s, found %s", want, Describe(v)))
}

// Duplicate is field.Duplicate with a detail that says where the first one is and what
// to do: `metadata.name: Duplicate value: "a": another Assign has this name (p.yaml: document 1); names must be unique`.
func Duplicate(path *field.Path, value any, detail string) *field.Error {
	fe := field.Duplicate(path, value)
	fe.Detail = detail
	return fe
}

// Unknown is the error for a field morph does not know (never silently dropped), in
// the one wording of every dialect:
// `spec.locaton: Forbidden: unknown field; the fields here are applyTo, location, match, parameters`.
// parent is nil for the document itself.
func Unknown(parent *field.Path, key string, allowed ...string) *field.Error {
	return field.Forbidden(child(parent, key), "unknown field; the fields here are "+strings.Join(allowed, ", "))
}

// CheckKnown returns the Unknown error for the first key of m (in sorted order) that
// is not in allowed, nil when every key is known.
func CheckKnown(m map[string]any, parent *field.Path, allowed ...string) *field.Error {
	if k, ok := UnknownField(m, allowed...); ok {
		return Unknown(parent, k, allowed...)
	}
	return nil
}

// child is parent.Child(name), or a root path when parent is nil.
func child(parent *field.Path, name string) *field.Path {
	if parent == nil {
		return field.NewPath(name)
	}
	return parent.Child(name)
}

// The string-path forms below are for readers that carry a field's path as text
// ("spec.mutations[0].patchType", as the CEL dialect's decoded types do): the text is
// parsed into a field.Path (ParsePath), and the error is the same typed field.Error.

// Required is field.Required at the field written as text: the field is missing;
// detail says what to give.
func (d Document) Required(at, detail string) error {
	return d.Err(atText(at, field.Required(ParsePath(at), detail)))
}

// Invalid is field.Invalid at the field written as text; detail says what is wrong,
// then after "; " what to do.
func (d Document) Invalid(at string, value any, detail string) error {
	return d.Err(atText(at, field.Invalid(ParsePath(at), Shown(value), detail)))
}

// NotSupported is field.NotSupported at the field written as text: value is none of
// supported.
func (d Document) NotSupported(at, value string, supported ...string) error {
	return d.Err(atText(at, field.NotSupported(ParsePath(at), value, supported)))
}

// Forbidden is field.Forbidden at the field written as text; detail says why and what
// to do.
func (d Document) Forbidden(at, detail string) error {
	return d.Err(atText(at, field.Forbidden(ParsePath(at), detail)))
}

// atText makes fe an error of the whole document when at is "".
func atText(at string, fe *field.Error) *field.Error {
	if at == "" {
		return wholeDocument(fe)
	}
	return fe
}

// ParsePath reads a field path written as text, "spec.rules[0].match" or
// "metadata.annotations[morph.dev/order]", into a field.Path: a number in brackets is an
// index, anything else in brackets a key.
func ParsePath(text string) *field.Path {
	var p *field.Path
	add := func(name string) {
		if name == "" {
			return
		}
		if p == nil {
			p = field.NewPath(name)
			return
		}
		p = p.Child(name)
	}
	for text != "" {
		i := strings.IndexAny(text, ".[")
		if i < 0 {
			add(text)
			break
		}
		add(text[:i])
		if text[i] == '.' {
			text = text[i+1:]
			continue
		}
		end := strings.IndexByte(text[i:], ']')
		if end < 0 { // not a path: keep the text as one name
			add(text[i:])
			break
		}
		inner := text[i+1 : i+end]
		if p == nil {
			p = field.NewPath("")
		}
		if n, err := strconv.Atoi(inner); err == nil && n >= 0 {
			p = p.Index(n)
		} else {
			p = p.Key(inner)
		}
		text = text[i+end+1:]
	}
	if p == nil {
		return field.NewPath("")
	}
	return p
}
