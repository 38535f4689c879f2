// Package path parses Gatekeeper mutation locations ("spec.containers[name: *].image")
// into a tiny AST, prints them back in a canonical form, and compiles pathTests into a
// per-depth index.
//
// The syntax (Gatekeeper and Policy Controller documentation):
//
//   - fields are separated by "."; a field is an identifier or a quoted string;
//   - a keyed list is addressed with [key: value] after a field, or [key: *] for every
//     element (a glob);
//   - identifiers are runs of any characters other than white space and . [ ] : * ' " \;
//   - single or double quotes allow any character; inside quotes a backslash escapes the
//     next character ("Use \" to escape and \\\" to escape" reads as
//     Use " to escape and \" to escape);
//   - an unquoted key value made only of digits (with an optional leading "-") is an
//     integer and matches a number in the object ([containerPort: 80]); quoted, it is a
//     string;
//   - white space between tokens is ignored;
//   - a list must be followed by "." and a field: lists of lists (a[x: 1][y: 2]) do not
//     exist in Kubernetes objects and are rejected.
//
// Errors give the 1-based column (in characters) of the offending token.
package path

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Kind tells the two node kinds apart.
type Kind uint8

// The node kinds.
const (
	// Field selects a field of an object.
	Field Kind = iota
	// List selects elements of a keyed list.
	List
)

// Node is one step of a location.
type Node struct {
	Kind Kind
	// Name is the field name (Field) or the key field (List).
	Name string
	// Value is the key value of a List node: a string or an int64; nil for a glob.
	Value any
	// Glob reports a [key: *] node, which visits every element.
	Glob bool
}

// Path is a parsed location.
type Path struct {
	Nodes []Node
}

// Error is a syntax error at a 1-based column.
type Error struct {
	Column int
	Msg    string
}

// Error reads `unexpected "]" at column 18: expected "." or "["`: what is wrong, where,
// then what was expected.
func (e *Error) Error() string {
	what, hint, ok := strings.Cut(e.Msg, ": ")
	if !ok {
		return fmt.Sprintf("%s at column %d", e.Msg, e.Column)
	}
	return fmt.Sprintf("%s at column %d: %s", what, e.Column, hint)
}

// MaxLength bounds the length of a location, so that a hostile policy cannot make the
// parser or the walker work without end.
const MaxLength = 4096

type tokenKind uint8

const (
	tEOF tokenKind = iota
	tIdent
	tString // quoted
	tDot
	tOpen
	tClose
	tColon
	tGlob
)

type token struct {
	kind tokenKind
	text string // identifier or unquoted string contents
	pos  int    // byte offset
}

func (t token) describe() string {
	switch t.kind {
	case tEOF:
		return "end of location"
	case tIdent:
		return strconv.Quote(t.text)
	case tString:
		return "quoted " + strconv.Quote(t.text)
	case tDot:
		return `"."`
	case tOpen:
		return `"["`
	case tClose:
		return `"]"`
	case tColon:
		return `":"`
	case tGlob:
		return `"*"`
	}
	return "token"
}

type scanner struct {
	src string
	pos int
}

func isSpecial(r rune) bool {
	switch r {
	case '.', '[', ']', ':', '*', '\'', '"', '\\':
		return true
	}
	return r == ' ' || r == '\t' || r == '\n' || r == '\r' || r == '\f' || r == '\v' || r < 0x20 || r == 0x7f
}

func punctuation(c byte) tokenKind {
	switch c {
	case '.':
		return tDot
	case '[':
		return tOpen
	case ']':
		return tClose
	case ':':
		return tColon
	case '*':
		return tGlob
	}
	return tEOF
}

func isSpace(b byte) bool {
	return b == ' ' || b == '\t' || b == '\n' || b == '\r' || b == '\f' || b == '\v'
}

func (s *scanner) errAt(pos int, format string, args ...any) *Error {
	return &Error{Column: utf8.RuneCountInString(s.src[:pos]) + 1, Msg: fmt.Sprintf(format, args...)}
}

func (s *scanner) next() (token, error) {
	for s.pos < len(s.src) && isSpace(s.src[s.pos]) {
		s.pos++
	}
	start := s.pos
	if s.pos >= len(s.src) {
		return token{kind: tEOF, pos: start}, nil
	}
	c := s.src[s.pos]
	if k := punctuation(c); k != tEOF {
		s.pos++
		return token{kind: k, pos: start}, nil
	}
	if c == '\'' || c == '"' {
		return s.quoted(c)
	}
	if c == '\\' {
		return token{}, s.errAt(start, `unexpected "\" outside quotes`)
	}
	for s.pos < len(s.src) {
		r, size := utf8.DecodeRuneInString(s.src[s.pos:])
		if r == utf8.RuneError && size == 1 {
			return token{}, s.errAt(s.pos, "invalid UTF-8")
		}
		if isSpecial(r) {
			break
		}
		s.pos += size
	}
	if s.pos == start {
		return token{}, s.errAt(start, "unexpected character %q", s.src[start:start+1])
	}
	return token{kind: tIdent, text: s.src[start:s.pos], pos: start}, nil
}

func (s *scanner) quoted(q byte) (token, error) {
	start := s.pos
	s.pos++
	var b strings.Builder
	for s.pos < len(s.src) {
		c := s.src[s.pos]
		switch c {
		case q:
			s.pos++
			return token{kind: tString, text: b.String(), pos: start}, nil
		case '\\':
			if s.pos+1 >= len(s.src) {
				return token{}, s.errAt(s.pos, "unterminated escape")
			}
			_, size := utf8.DecodeRuneInString(s.src[s.pos+1:])
			b.WriteString(s.src[s.pos+1 : s.pos+1+size])
			s.pos += 1 + size
		default:
			b.WriteByte(c)
			s.pos++
		}
	}
	return token{}, s.errAt(start, "unterminated quoted string (add the closing %c)", q)
}

// Parse parses a location.
func Parse(location string) (Path, error) {
	if len(location) > MaxLength {
		return Path{}, &Error{Column: 1, Msg: fmt.Sprintf("location is %d bytes long, more than the %d allowed", len(location), MaxLength)}
	}
	if !utf8.ValidString(location) {
		return Path{}, &Error{Column: 1, Msg: "location is not valid UTF-8"}
	}
	s := &scanner{src: location}
	var p Path
	dot := -1 // offset of the last ".", for the error of a trailing dot
	tok, err := s.next()
	if err != nil {
		return Path{}, err
	}
	if tok.kind == tEOF {
		return Path{}, s.errAt(0, "empty location: give a path such as spec.containers[name: *].image")
	}
	for {
		// A field.
		switch tok.kind {
		case tIdent, tString:
		case tEOF:
			return Path{}, s.errAt(dot, `the location ends with ".": a field name must follow it`)
		default:
			return Path{}, s.errAt(tok.pos, "unexpected %s: expected a field name", tok.describe())
		}
		if tok.text == "" {
			return Path{}, s.errAt(tok.pos, "empty field name")
		}
		p.Nodes = append(p.Nodes, Node{Kind: Field, Name: tok.text})
		if tok, err = s.next(); err != nil {
			return Path{}, err
		}
		if tok.kind == tOpen {
			n, err := s.list(tok)
			if err != nil {
				return Path{}, err
			}
			p.Nodes = append(p.Nodes, n)
			if tok, err = s.next(); err != nil {
				return Path{}, err
			}
			if tok.kind == tOpen {
				return Path{}, s.errAt(tok.pos, `unexpected "[": a list must be followed by "." and a field (lists of lists are not supported)`)
			}
		}
		switch tok.kind {
		case tEOF:
			return p, nil
		case tDot:
			dot = tok.pos
			if tok, err = s.next(); err != nil {
				return Path{}, err
			}
		default:
			return Path{}, s.errAt(tok.pos, `unexpected %s: expected "." or "["`, tok.describe())
		}
	}
}

// list parses the rest of "[key: value]" after the "[" token open.
func (s *scanner) list(open token) (Node, error) {
	key, err := s.next()
	if err != nil {
		return Node{}, err
	}
	if key.kind != tIdent && key.kind != tString {
		return Node{}, s.errAt(key.pos, "unexpected %s: expected the key field of the list, as in [name: value]", key.describe())
	}
	if key.text == "" {
		return Node{}, s.errAt(key.pos, "empty key field name")
	}
	colon, err := s.next()
	if err != nil {
		return Node{}, err
	}
	if colon.kind != tColon {
		return Node{}, s.errAt(colon.pos, `unexpected %s: expected ":" after the key field`, colon.describe())
	}
	val, err := s.next()
	if err != nil {
		return Node{}, err
	}
	n := Node{Kind: List, Name: key.text}
	switch val.kind {
	case tGlob:
		n.Glob = true
	case tString:
		n.Value = val.text
	case tIdent:
		if i, ok := integer(val.text); ok {
			n.Value = i
		} else {
			n.Value = val.text
		}
	default:
		return Node{}, s.errAt(val.pos, "unexpected %s: expected the key value or *", val.describe())
	}
	closing, err := s.next()
	if err != nil {
		return Node{}, err
	}
	if closing.kind != tClose {
		if closing.kind == tEOF {
			return Node{}, s.errAt(open.pos, `unclosed "[": add "]"`)
		}
		return Node{}, s.errAt(closing.pos, `unexpected %s: expected "]"`, closing.describe())
	}
	return n, nil
}

// integer reports whether an unquoted key value is an integer literal.
func integer(s string) (int64, bool) {
	digits := strings.TrimPrefix(s, "-")
	if digits == "" || (len(digits) > 1 && digits[0] == '0') {
		return 0, false
	}
	for i := 0; i < len(digits); i++ {
		if digits[i] < '0' || digits[i] > '9' {
			return 0, false
		}
	}
	i, err := strconv.ParseInt(s, 10, 64)
	return i, err == nil
}

// String prints the canonical form: identifiers bare where possible, otherwise double
// quoted; lists as [key: value].
func (p Path) String() string { return p.Prefix(len(p.Nodes)) }

// Prefix prints the first n nodes.
func (p Path) Prefix(n int) string {
	var b strings.Builder
	for i, nd := range p.Nodes[:n] {
		switch nd.Kind {
		case Field:
			if i > 0 {
				b.WriteByte('.')
			}
			writeName(&b, nd.Name)
		case List:
			b.WriteByte('[')
			writeName(&b, nd.Name)
			b.WriteString(": ")
			switch v := nd.Value.(type) {
			case nil:
				b.WriteByte('*')
			case int64:
				b.WriteString(strconv.FormatInt(v, 10))
			case string:
				if _, isInt := integer(v); isInt {
					writeQuoted(&b, v)
				} else {
					writeName(&b, v)
				}
			}
			b.WriteByte(']')
		}
	}
	return b.String()
}

func writeName(b *strings.Builder, s string) {
	bare := s != ""
	for _, r := range s {
		if isSpecial(r) {
			bare = false
			break
		}
	}
	if bare {
		b.WriteString(s)
		return
	}
	writeQuoted(b, s)
}

func writeQuoted(b *strings.Builder, s string) {
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		if s[i] == '"' || s[i] == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	b.WriteByte('"')
}

// Equal reports whether two nodes are the same step (same kind, name, key value, glob).
func (n Node) Equal(o Node) bool {
	return n.Kind == o.Kind && n.Name == o.Name && n.Glob == o.Glob && n.Value == o.Value
}

// HasPrefix reports whether q is a prefix of (or equal to) p, node by node: a glob is
// only a prefix of a glob ([name: sidecar] is not a prefix of [name: *]), as in
// Gatekeeper's pathTests (pkg/mutation/path/tester/tester.go, isPrefix).
func (p Path) HasPrefix(q Path) bool {
	if len(q.Nodes) > len(p.Nodes) {
		return false
	}
	for i, qn := range q.Nodes {
		if !p.Nodes[i].Equal(qn) {
			return false
		}
	}
	return true
}

// KeyMatches reports whether a list element's key field value v is the key value of a
// List node: a string equals a string, an integer equals a number of the same value. A
// glob matches every value.
func (n Node) KeyMatches(v any) bool {
	switch w := n.Value.(type) {
	case nil:
		return n.Glob
	case string:
		s, ok := v.(string)
		return ok && s == w
	case int64:
		switch x := v.(type) {
		case int64:
			return x == w
		case float64:
			return x == float64(w)
		case int:
			return int64(x) == w
		}
	}
	return false
}

// Last returns the last node.
func (p Path) Last() Node { return p.Nodes[len(p.Nodes)-1] }
