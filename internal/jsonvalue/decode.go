// Package jsonvalue decodes JSON into the generic value model the engine works on
// (map[string]any, []any, string, bool, int64, float64, nil) in one pass, without
// reflection and without the intermediate json.Number strings of encoding/json.
//
// It exists for the webhook's hot path: every AdmissionReview carries the object (and
// often the old object) as raw JSON, and decoding it with encoding/json and then
// converting its json.Numbers was most of the allocations of a request.
//
// The result is exactly what encoding/json gives with Decoder.UseNumber followed by
// this conversion of every json.Number: json.Number.Int64 if it succeeds (so "-0" is
// int64(0), while "1.0" and "1e3" are not integers), else json.Number.Float64, and a
// number no float64 holds (1e400) is an error, unless a later duplicate key replaces
// it, since that conversion runs on the decoded value. Options.Normalize adds
// engine.Normalize's rule (whole numbers such as 1.0 become int64), as the webhook
// needs. Strings are unescaped and invalid UTF-8 replaced by U+FFFD exactly as
// encoding/json does, duplicate object keys keep the last value, and nesting deeper
// than 10000 is an error, as in encoding/json. The fuzz target
// FuzzDecodeMatchesEncodingJSON checks this equivalence on arbitrary input.
//
// Decoded strings never alias the input: the caller may reuse data afterwards. They
// are copied into a few buffers per call, shared by the strings of that call.
package jsonvalue

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"
)

// MaxDepth is encoding/json's nesting limit: 10000 nested objects or arrays are fine,
// one more is an error.
const MaxDepth = 10000

// stackSize is the initial capacity of the element stacks (see decoder.values): enough
// for the open containers of a typical Kubernetes object.
const stackSize = 32

// Options choose how numbers are typed.
type Options struct {
	// Normalize types as int64 also the numbers written with a fraction or an exponent
	// whose value is whole and below 2^53 in magnitude ("1.0", "2e3", "-0.0"), as
	// engine.Normalize does for a float64. Without it they are float64, as
	// json.Number.Float64 gives them.
	Normalize bool
}

// Decode decodes one JSON value, with surrounding whitespace, with the zero Options.
func Decode(data []byte) (any, error) {
	return Options{}.Decode(data)
}

// DecodeObject decodes a JSON object with the zero Options; see Options.DecodeObject.
func DecodeObject(data []byte) (map[string]any, error) {
	return Options{}.DecodeObject(data)
}

// Decode decodes one JSON value, with surrounding whitespace. Anything but whitespace
// after the value is an error.
func (o Options) Decode(data []byte) (any, error) {
	var values [stackSize]any
	var keys [stackSize]string
	d := decoder{data: data, normalize: o.Normalize, values: values[:0], keys: keys[:0]}
	v, err := d.value()
	if err != nil {
		return nil, err
	}
	d.skipSpace()
	if d.pos < len(d.data) {
		return nil, d.unexpected("after top-level value")
	}
	if d.outOfRange > 0 {
		if err := firstOutOfRange(v); err != nil {
			return nil, err
		}
	}
	return v, nil
}

// DecodeObject decodes a JSON object as Decode does. JSON null gives a nil map and no
// error, as json.Unmarshal into a map does; any other value than an object is an error.
func (o Options) DecodeObject(data []byte) (map[string]any, error) {
	v, err := o.Decode(data)
	if err != nil || v == nil {
		return nil, err
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("expected a JSON object, found %s", kindOf(v))
	}
	return m, nil
}

// kindOf names the JSON type of a decoded value that is not an object.
func kindOf(v any) string {
	switch v.(type) {
	case []any:
		return "a list"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case int64, float64:
		return "a number"
	}
	return fmt.Sprintf("%T", v)
}

// decoder is the state of one Decode call.
type decoder struct {
	data      []byte
	pos       int
	depth     int
	normalize bool

	// values and keys are stacks of the elements of the arrays and objects being
	// decoded, shared by all levels, so that each array and map is made once with its
	// final size.
	values []any
	keys   []string

	// strs holds the bytes of the decoded strings. Bytes are only ever appended past
	// its length, never written where a returned string points, so the strings stay
	// immutable; a full buffer is replaced by a new one, never grown in place.
	strs []byte
	// scratch unescapes strings that need it before they are copied to strs.
	scratch []byte

	// outOfRange counts the numbers no float64 holds: see outOfRange.
	outOfRange int
}

// outOfRange stands in the value for a number no float64 holds (1e400) until the whole
// input is decoded. Only one that is still in the final value is an error: encoding/json
// converts json.Numbers after decoding, so a number under a duplicate key that a later
// member replaces never counts, and neither does one here.
type outOfRange struct {
	offset int
	lit    string
}

func (e *outOfRange) error() error {
	return &SyntaxError{Offset: e.offset, Msg: fmt.Sprintf("number %s is out of range", e.lit)}
}

// firstOutOfRange reports the out-of-range number of v that comes first in the input.
func firstOutOfRange(v any) error {
	var first *outOfRange
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for _, e := range x {
				walk(e)
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		case *outOfRange:
			if first == nil || x.offset < first.offset {
				first = x
			}
		}
	}
	walk(v)
	if first == nil {
		return nil
	}
	return first.error()
}

func (d *decoder) skipSpace() {
	for d.pos < len(d.data) {
		switch d.data[d.pos] {
		case ' ', '\t', '\n', '\r':
			d.pos++
		default:
			return
		}
	}
}

// value decodes the value starting at the next non-space byte.
func (d *decoder) value() (any, error) {
	d.skipSpace()
	if d.pos >= len(d.data) {
		return nil, d.eof()
	}
	switch c := d.data[d.pos]; {
	case c == '{':
		return d.object()
	case c == '[':
		return d.array()
	case c == '"':
		s, err := d.string()
		if err != nil {
			return nil, err
		}
		return any(s), nil
	case c == 't':
		return true, d.literal("true")
	case c == 'f':
		return false, d.literal("false")
	case c == 'n':
		return nil, d.literal("null")
	case c == '-' || '0' <= c && c <= '9':
		return d.number()
	}
	return nil, d.unexpected("looking for beginning of value")
}

func (d *decoder) literal(word string) error {
	for i := 0; i < len(word); i++ {
		if d.pos >= len(d.data) {
			return d.eof()
		}
		if d.data[d.pos] != word[i] {
			return d.unexpected(fmt.Sprintf("in literal %s (expecting %s)", word, quoteByte(word[i])))
		}
		d.pos++
	}
	return nil
}

// enter counts one more level of nesting, refusing more than MaxDepth.
func (d *decoder) enter() error {
	d.depth++
	if d.depth > MaxDepth {
		return &SyntaxError{Offset: d.pos, Msg: fmt.Sprintf("exceeded max depth of %d nested objects and arrays", MaxDepth)}
	}
	return nil
}

func (d *decoder) object() (any, error) {
	if err := d.enter(); err != nil {
		return nil, err
	}
	d.pos++ // {
	d.skipSpace()
	if d.pos < len(d.data) && d.data[d.pos] == '}' {
		d.pos++
		d.depth--
		return map[string]any{}, nil
	}
	base, keyBase := len(d.values), len(d.keys)
	for {
		if d.pos >= len(d.data) {
			return nil, d.eof()
		}
		if d.data[d.pos] != '"' {
			return nil, d.unexpected("looking for beginning of object key string")
		}
		key, err := d.string()
		if err != nil {
			return nil, err
		}
		d.skipSpace()
		if d.pos >= len(d.data) {
			return nil, d.eof()
		}
		if d.data[d.pos] != ':' {
			return nil, d.unexpected("after object key")
		}
		d.pos++
		v, err := d.value()
		if err != nil {
			return nil, err
		}
		d.keys = append(d.keys, key)
		d.values = append(d.values, v)
		d.skipSpace()
		if d.pos >= len(d.data) {
			return nil, d.eof()
		}
		c := d.data[d.pos]
		d.pos++
		if c == ',' {
			d.skipSpace()
			continue
		}
		if c == '}' {
			break
		}
		d.pos--
		return nil, d.unexpected("after object key:value pair")
	}
	keys, values := d.keys[keyBase:], d.values[base:]
	m := make(map[string]any, len(keys))
	for i, k := range keys {
		m[k] = values[i] // in order: the last of duplicate keys wins
	}
	clear(values)
	d.keys, d.values = d.keys[:keyBase], d.values[:base]
	d.depth--
	return m, nil
}

func (d *decoder) array() (any, error) {
	if err := d.enter(); err != nil {
		return nil, err
	}
	d.pos++ // [
	d.skipSpace()
	if d.pos < len(d.data) && d.data[d.pos] == ']' {
		d.pos++
		d.depth--
		return []any{}, nil
	}
	base := len(d.values)
	for {
		v, err := d.value()
		if err != nil {
			return nil, err
		}
		d.values = append(d.values, v)
		d.skipSpace()
		if d.pos >= len(d.data) {
			return nil, d.eof()
		}
		c := d.data[d.pos]
		d.pos++
		if c == ',' {
			continue
		}
		if c == ']' {
			break
		}
		d.pos--
		return nil, d.unexpected("after array element")
	}
	values := d.values[base:]
	list := make([]any, len(values))
	copy(list, values)
	clear(values)
	d.values = d.values[:base]
	d.depth--
	return list, nil
}

// string decodes the string starting at the opening quote at d.pos.
func (d *decoder) string() (string, error) {
	start := d.pos + 1
	for i := start; i < len(d.data); i++ {
		switch c := d.data[i]; {
		case c == '"':
			d.pos = i + 1
			return d.save(d.data[start:i]), nil
		case c == '\\' || c < 0x20 || c >= utf8.RuneSelf:
			// Escapes, errors and non-ASCII (which may need U+FFFD) take the slow path.
			d.pos = i
			return d.unescape(start)
		}
	}
	d.pos = len(d.data)
	return "", d.eof()
}

// unescape decodes the rest of the string whose content starts at start, d.pos being
// the first byte that is not plain ASCII, as encoding/json does.
func (d *decoder) unescape(start int) (string, error) {
	b := append(d.scratch[:0], d.data[start:d.pos]...)
	defer func() { d.scratch = b[:0] }()
	for d.pos < len(d.data) {
		c := d.data[d.pos]
		switch {
		case c == '"':
			d.pos++
			return d.save(b), nil
		case c == '\\':
			d.pos++
			if d.pos >= len(d.data) {
				return "", d.eof()
			}
			switch e := d.data[d.pos]; e {
			case '"', '\\', '/':
				b = append(b, e)
			case 'b':
				b = append(b, '\b')
			case 'f':
				b = append(b, '\f')
			case 'n':
				b = append(b, '\n')
			case 'r':
				b = append(b, '\r')
			case 't':
				b = append(b, '\t')
			case 'u':
				d.pos++
				r, err := d.hex4()
				if err != nil {
					return "", err
				}
				if utf16.IsSurrogate(r) {
					// A pair needs a second \u escape right after; a lone half
					// becomes U+FFFD and what follows is decoded on its own.
					high := r
					r = utf8.RuneError
					if d.pos+1 < len(d.data) && d.data[d.pos] == '\\' && d.data[d.pos+1] == 'u' {
						if low, ok := peekHex4(d.data[d.pos+2:]); ok {
							if dec := utf16.DecodeRune(high, low); dec != utf8.RuneError {
								r = dec
								d.pos += 6
							}
						}
					}
				}
				b = utf8.AppendRune(b, r)
				continue
			default:
				return "", d.unexpected("in string escape code")
			}
			d.pos++
		case c < 0x20:
			return "", d.unexpected("in string literal")
		case c < utf8.RuneSelf:
			b = append(b, c)
			d.pos++
		default:
			r, size := utf8.DecodeRune(d.data[d.pos:])
			if r == utf8.RuneError && size == 1 {
				b = utf8.AppendRune(b, utf8.RuneError)
			} else {
				b = append(b, d.data[d.pos:d.pos+size]...)
			}
			d.pos += size
		}
	}
	return "", d.eof()
}

// hex4 decodes the four hexadecimal digits of a \u escape at d.pos.
func (d *decoder) hex4() (rune, error) {
	var r rune
	for range 4 {
		if d.pos >= len(d.data) {
			return 0, d.eof()
		}
		h, ok := hexValue(d.data[d.pos])
		if !ok {
			return 0, d.unexpected(`in \u hexadecimal character escape`)
		}
		r = r<<4 | h
		d.pos++
	}
	return r, nil
}

func peekHex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		h, ok := hexValue(c)
		if !ok {
			return 0, false
		}
		r = r<<4 | h
	}
	return r, true
}

func hexValue(c byte) (rune, bool) {
	switch {
	case '0' <= c && c <= '9':
		return rune(c - '0'), true
	case 'a' <= c && c <= 'f':
		return rune(c - 'a' + 10), true
	case 'A' <= c && c <= 'F':
		return rune(c - 'A' + 10), true
	}
	return 0, false
}

// save copies b into the string buffer and returns it as a string.
func (d *decoder) save(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	if cap(d.strs)-len(d.strs) < len(b) {
		// The strings still to come hold at most the rest of the input, unless
		// invalid UTF-8 grows into U+FFFD; a later buffer covers that rare case.
		d.strs = make([]byte, 0, max(len(b), len(d.data)-d.pos+len(b)))
	}
	n := len(d.strs)
	d.strs = append(d.strs, b...)
	// The bytes d.strs[n:] are never written again (see decoder.strs).
	return unsafe.String(&d.strs[n], len(b))
}

// number decodes the number at d.pos.
func (d *decoder) number() (any, error) {
	start := d.pos
	neg := d.data[d.pos] == '-'
	if neg {
		d.pos++
	}
	if d.pos >= len(d.data) {
		return nil, d.eof()
	}
	switch c := d.data[d.pos]; {
	case c == '0':
		d.pos++
	case '1' <= c && c <= '9':
		d.digits()
	default:
		return nil, d.unexpected("in numeric literal")
	}
	integer := true
	if d.pos < len(d.data) && d.data[d.pos] == '.' {
		integer = false
		d.pos++
		if d.pos >= len(d.data) {
			return nil, d.eof()
		}
		if !isDigit(d.data[d.pos]) {
			return nil, d.unexpected("after decimal point in numeric literal")
		}
		d.digits()
	}
	if d.pos < len(d.data) && (d.data[d.pos] == 'e' || d.data[d.pos] == 'E') {
		integer = false
		d.pos++
		if d.pos < len(d.data) && (d.data[d.pos] == '+' || d.data[d.pos] == '-') {
			d.pos++
		}
		if d.pos >= len(d.data) {
			return nil, d.eof()
		}
		if !isDigit(d.data[d.pos]) {
			return nil, d.unexpected("in exponent of numeric literal")
		}
		d.digits()
	}
	lit := d.data[start:d.pos]
	if integer {
		if i, ok := smallInt(lit, neg); ok {
			return any(i), nil
		}
	}
	// A view of lit that strconv does not keep: no copy of the literal is made.
	f, err := strconv.ParseFloat(unsafe.String(&lit[0], len(lit)), 64)
	if err != nil {
		if !errors.Is(err, strconv.ErrRange) {
			return nil, &SyntaxError{Offset: start, Msg: fmt.Sprintf("invalid number %s", lit)}
		}
		// Out of range is an error only if the number survives into the result (a later
		// duplicate key may replace it, as encoding/json allows): see outOfRange.
		d.outOfRange++
		return &outOfRange{offset: start, lit: string(lit)}, nil //nolint:nilerr // deferred, see above
	}
	if d.normalize && f == math.Trunc(f) && math.Abs(f) < 1<<53 {
		return any(int64(f)), nil
	}
	return any(f), nil
}

// smallInt parses an integer literal (JSON syntax, already checked) that fits in
// int64, as strconv.ParseInt does.
func smallInt(lit []byte, neg bool) (int64, bool) {
	digits := lit
	if neg {
		digits = lit[1:]
	}
	if len(digits) > 18 {
		// Might not fit: let strconv decide.
		i, err := strconv.ParseInt(unsafe.String(&lit[0], len(lit)), 10, 64)
		return i, err == nil
	}
	var u int64
	for _, c := range digits {
		u = u*10 + int64(c-'0')
	}
	if neg {
		u = -u
	}
	return u, true
}

func (d *decoder) digits() {
	for d.pos < len(d.data) && isDigit(d.data[d.pos]) {
		d.pos++
	}
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }
