package katalog

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/morph-dev/morph/internal/engine"
	"github.com/morph-dev/morph/internal/policy"
)

// Path is a parsed field path: the map keys from the object's root to the field.
//
// The text form is dot notation, spec.replicas or metadata.labels.managed-by. A key
// holding a dot, a quote, a bracket, a backslash or white space is written in double
// quotes, with \" and \\ as the only escapes: metadata.labels."app.kubernetes.io/name".
// List indexes are not part of the syntax: Katalog rules address map fields only.
type Path []string

// PathError is a syntax error in a field path, with the 1-based column (in characters)
// where it was found.
type PathError struct {
	Column int
	Msg    string
}

func (e *PathError) Error() string { return fmt.Sprintf("%s at column %d", e.Msg, e.Column) }

// ParsePath parses a field path in dot notation.
func ParsePath(s string) (Path, error) {
	col := func(i int) int { return utf8.RuneCountInString(s[:i]) + 1 }
	if s == "" {
		return nil, &PathError{Column: 1, Msg: "empty field path: give a dot-separated path such as spec.replicas"}
	}
	var keys Path
	i := 0
	for {
		if s[i] == '"' {
			key, next, err := parseQuoted(s, i, col)
			if err != nil {
				return nil, err
			}
			keys = append(keys, key)
			i = next
		} else {
			j := i
			for j < len(s) && s[j] != '.' {
				switch c := s[j]; {
				case c == '"':
					return nil, &PathError{Column: col(j), Msg: `unexpected '"' inside a key: quote the whole key, as in labels."app.kubernetes.io/name"`}
				case c == '[' || c == ']':
					return nil, &PathError{Column: col(j), Msg: fmt.Sprintf("unexpected %q: list indexes are not supported, a field path names map keys only", c)}
				case c == '\\':
					return nil, &PathError{Column: col(j), Msg: `unexpected '\' outside quotes: quote the key`}
				case c <= ' ' || c == 0x7f:
					return nil, &PathError{Column: col(j), Msg: fmt.Sprintf("unexpected %q: quote keys holding white space or control characters", c)}
				}
				j++
			}
			if j == i {
				return nil, &PathError{Column: col(i), Msg: `empty key: expected a key before "."`}
			}
			keys = append(keys, s[i:j])
			i = j
		}
		if i == len(s) {
			return keys, nil
		}
		if s[i] != '.' {
			r, _ := utf8.DecodeRuneInString(s[i:])
			return nil, &PathError{Column: col(i), Msg: fmt.Sprintf(`unexpected %q after a quoted key: expected "."`, r)}
		}
		i++
		if i == len(s) {
			return nil, &PathError{Column: col(i), Msg: `the path ends with ".": expected a key`}
		}
	}
}

// parseQuoted reads the quoted key starting at s[start] == '"' and returns it with the
// index just past the closing quote.
func parseQuoted(s string, start int, col func(int) int) (string, int, error) {
	var b strings.Builder
	for j := start + 1; j < len(s); {
		switch s[j] {
		case '\\':
			if j+1 >= len(s) {
				return "", 0, &PathError{Column: col(start), Msg: "unterminated quoted key"}
			}
			if n := s[j+1]; n != '"' && n != '\\' {
				r, _ := utf8.DecodeRuneInString(s[j+1:])
				return "", 0, &PathError{Column: col(j), Msg: fmt.Sprintf(`unknown escape "\%c": only \" and \\ are escapes`, r)}
			}
			b.WriteByte(s[j+1])
			j += 2
		case '"':
			if b.Len() == 0 {
				return "", 0, &PathError{Column: col(start), Msg: "empty quoted key"}
			}
			return b.String(), j + 1, nil
		default:
			b.WriteByte(s[j])
			j++
		}
	}
	return "", 0, &PathError{Column: col(start), Msg: "unterminated quoted key: add the closing '\"'"}
}

// String prints the path in its canonical dot notation; ParsePath(p.String()) gives p.
func (p Path) String() string {
	var b strings.Builder
	for i, k := range p {
		if i > 0 {
			b.WriteByte('.')
		}
		if !needsQuotes(k) {
			b.WriteString(k)
			continue
		}
		b.WriteByte('"')
		for j := 0; j < len(k); j++ {
			if k[j] == '"' || k[j] == '\\' {
				b.WriteByte('\\')
			}
			b.WriteByte(k[j])
		}
		b.WriteByte('"')
	}
	return b.String()
}

func needsQuotes(k string) bool {
	if k == "" || k[0] == '"' {
		return true
	}
	for i := 0; i < len(k); i++ {
		switch c := k[i]; {
		case c == '.', c == '"', c == '\\', c == '[', c == ']', c <= ' ', c == 0x7f:
			return true
		}
	}
	return false
}

// Pointer returns the path as an RFC 6901 JSON Pointer: spec.replicas is /spec/replicas.
func (p Path) Pointer() string { return engine.Pointer(p...) }

// Get returns the value at the path and whether it is present.
func (p Path) Get(obj map[string]any) (any, bool) {
	var cur any = obj
	for _, k := range p {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		cur, ok = m[k]
		if !ok {
			return nil, false
		}
	}
	return cur, true
}

// set writes v at the path through w, creating missing (or null) parent maps, and
// returns the new root. A parent that holds something other than a map is an error.
func (p Path) set(obj map[string]any, v any, w *engine.Writer) (map[string]any, error) {
	return p.setFrom(0, obj, v, w)
}

func (p Path) setFrom(depth int, m map[string]any, v any, w *engine.Writer) (map[string]any, error) {
	out := w.Map(m)
	key := p[depth]
	if depth == len(p)-1 {
		out[key] = v
		return out, nil
	}
	var child map[string]any
	switch c := m[key].(type) {
	case map[string]any:
		child = c
	case nil:
	default:
		return nil, fmt.Errorf("%s is %s, not an object: the field cannot be set below it", p[:depth+1], describe(c))
	}
	nc, err := p.setFrom(depth+1, child, v, w)
	if err != nil {
		return nil, err
	}
	out[key] = nc
	return out, nil
}

// remove deletes the field at the path through w, if present, and reports whether it did.
func (p Path) remove(obj map[string]any, w *engine.Writer) (map[string]any, bool) {
	parents := make([]map[string]any, len(p))
	cur := obj
	for i, k := range p {
		if cur == nil {
			return obj, false
		}
		parents[i] = cur
		if i == len(p)-1 {
			if _, ok := cur[k]; !ok {
				return obj, false
			}
			break
		}
		cur, _ = cur[k].(map[string]any)
	}
	child := w.Map(parents[len(p)-1])
	delete(child, p[len(p)-1])
	for i := len(p) - 2; i >= 0; i-- {
		parent := w.Map(parents[i])
		parent[p[i]] = child
		child = parent
	}
	return child, true
}

// describe names the JSON type of a decoded value, for messages.
func describe(v any) string { return policy.Describe(v) }
