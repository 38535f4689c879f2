package jsonvalue

import (
	"fmt"
	"strconv"
)

// SyntaxError is input that is not one JSON value, or a number no float64 holds, or
// nesting deeper than encoding/json allows.
type SyntaxError struct {
	// Offset is the byte offset of the first byte in error (the input's length when
	// it ends too early).
	Offset int
	// Msg says what is wrong, in encoding/json's words where it has some.
	Msg string
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("%s at byte offset %d", e.Msg, e.Offset)
}

// unexpected reports the byte at d.pos, which does not fit where it is.
func (d *decoder) unexpected(context string) error {
	return &SyntaxError{Offset: d.pos, Msg: fmt.Sprintf("invalid character %s %s", quoteByte(d.data[d.pos]), context)}
}

// eof reports input that ends inside a value.
func (d *decoder) eof() error {
	return &SyntaxError{Offset: len(d.data), Msg: "unexpected end of JSON input"}
}

// quoteByte prints a byte of the input for an error message: 'x' for printable ASCII,
// its escape or its hexadecimal value otherwise.
func quoteByte(c byte) string {
	switch {
	case c == '\'':
		return `'\''`
	case c == '"':
		return `'"'`
	case c < 0x20 || c >= 0x7f:
		if q := strconv.QuoteRune(rune(c)); c < 0x20 && len(q) == 4 {
			return q // '\n', '\t', ...
		}
		return fmt.Sprintf("byte 0x%02x", c)
	}
	return "'" + string(c) + "'"
}
