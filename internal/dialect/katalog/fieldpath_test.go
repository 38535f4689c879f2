package katalog

import (
	"errors"
	"slices"
	"testing"
)

func TestParsePath(t *testing.T) {
	tests := []struct {
		in      string
		want    Path
		pointer string
	}{
		{"spec.replicas", Path{"spec", "replicas"}, "/spec/replicas"},
		{"metadata.labels.managed-by", Path{"metadata", "labels", "managed-by"}, "/metadata/labels/managed-by"},
		{`metadata.labels."app.kubernetes.io/name"`, Path{"metadata", "labels", "app.kubernetes.io/name"}, "/metadata/labels/app.kubernetes.io~1name"},
		{`a."b\"c".d`, Path{"a", `b"c`, "d"}, `/a/b"c/d`},
		{`"x\\y"`, Path{`x\y`}, `/x\y`},
		{"a/b.c~d", Path{"a/b", "c~d"}, "/a~1b/c~0d"},
		{"spec.naïve", Path{"spec", "naïve"}, "/spec/naïve"},
	}
	for _, tt := range tests {
		got, err := ParsePath(tt.in)
		if err != nil {
			t.Errorf("ParsePath(%q): %v", tt.in, err)
			continue
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("ParsePath(%q) = %q, want %q", tt.in, got, tt.want)
		}
		if p := got.Pointer(); p != tt.pointer {
			t.Errorf("Pointer(%q) = %q, want %q", tt.in, p, tt.pointer)
		}
		again, err := ParsePath(got.String())
		if err != nil || !slices.Equal(again, got) {
			t.Errorf("round trip of %q through %q: %q, %v", tt.in, got.String(), again, err)
		}
	}
}

func TestParsePathErrors(t *testing.T) {
	tests := []struct {
		in     string
		column int
		msg    string
	}{
		{"", 1, "empty field path: give a dot-separated path such as spec.replicas"},
		{".spec", 1, `empty key: expected a key before "."`},
		{"spec..x", 6, `empty key: expected a key before "."`},
		{"spec.", 6, `the path ends with ".": expected a key`},
		{"spec.containers[0]", 16, `unexpected '[': list indexes are not supported, a field path names map keys only`},
		{`labels."a.b`, 8, `unterminated quoted key: add the closing '"'`},
		{`labels."a.b"x`, 13, `unexpected 'x' after a quoted key: expected "."`},
		{`labels.""`, 8, "empty quoted key"},
		{`labels."a\n"`, 10, `unknown escape "\n": only \" and \\ are escapes`},
		{`lab"els`, 4, `unexpected '"' inside a key: quote the whole key, as in labels."app.kubernetes.io/name"`},
		{"spec.my key", 8, `unexpected ' ': quote keys holding white space or control characters`},
		{"naïve.x y", 8, `unexpected ' ': quote keys holding white space or control characters`},
	}
	for _, tt := range tests {
		_, err := ParsePath(tt.in)
		var pe *PathError
		if !errors.As(err, &pe) {
			t.Errorf("ParsePath(%q): want a PathError, got %v", tt.in, err)
			continue
		}
		if pe.Column != tt.column || pe.Msg != tt.msg {
			t.Errorf("ParsePath(%q) = %q at column %d, want %q at column %d", tt.in, pe.Msg, pe.Column, tt.msg, tt.column)
		}
	}
}

// FuzzParsePath checks that the parser never panics, that columns stay inside the
// input, and that every parsed path prints to a text that parses back to it.
func FuzzParsePath(f *testing.F) {
	for _, s := range []string{"spec.replicas", `metadata.labels."app.kubernetes.io/name"`, `a."b\"c"`, "a..b", `"`, `"\`, "[0]", "ü.x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParsePath(s)
		if err != nil {
			var pe *PathError
			if !errors.As(err, &pe) {
				t.Fatalf("not a PathError: %v", err)
			}
			if pe.Column < 1 || pe.Column > len([]rune(s))+1 {
				t.Fatalf("column %d outside %q", pe.Column, s)
			}
			return
		}
		if len(p) == 0 {
			t.Fatalf("%q parsed to an empty path", s)
		}
		again, err := ParsePath(p.String())
		if err != nil || !slices.Equal(again, p) {
			t.Fatalf("%q -> %q -> %q (%v)", s, p.String(), again, err)
		}
	})
}
