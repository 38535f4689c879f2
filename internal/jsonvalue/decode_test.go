package jsonvalue_test

import (
	"errors"
	"flag"
	"fmt"
	"github.com/morph-dev/morph/internal/jsonvalue"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files of testdata/")

func TestDecodeValues(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want any
	}{
		// Literals and whitespace.
		{"true", `true`, true},
		{"false", `false`, false},
		{"null", `null`, nil},
		{"RFC 8259 whitespace around", " \t\r\n true \t\r\n ", true},
		{"whitespace inside", "{ \"a\" :\t[ 1 ,\n2 ] }", map[string]any{"a": []any{int64(1), int64(2)}}},

		// Numbers: json.Number.Int64 when it parses, else Float64.
		{"zero", `0`, int64(0)},
		{"minus zero is an integer", `-0`, int64(0)},
		{"small", `42`, int64(42)},
		{"negative", `-17`, int64(-17)},
		{"18 digits", `999999999999999999`, int64(999999999999999999)},
		{"max int64", `9223372036854775807`, int64(math.MaxInt64)},
		{"min int64", `-9223372036854775808`, int64(math.MinInt64)},
		{"beyond int64 is float", `9223372036854775808`, float64(9223372036854775808)},
		{"below int64 is float", `-9223372036854775809`, float64(-9223372036854775809)},
		{"fraction is float even if whole", `1.0`, float64(1)},
		{"exponent is float even if whole", `1e3`, float64(1000)},
		{"capital exponent", `2E+2`, float64(200)},
		{"negative exponent", `25e-1`, 2.5},
		{"fraction", `-0.5`, -0.5},
		{"minus zero fraction", `-0.0`, math.Copysign(0, -1)},
		{"underflow is zero", `1e-400`, float64(0)},
		{"largest float", `1.7976931348623157e308`, math.MaxFloat64},

		// Strings.
		{"empty string", `""`, ""},
		{"plain", `"abc"`, "abc"},
		{"short escapes", `"\"\\\/\b\f\n\r\t"`, "\"\\/\b\f\n\r\t"},
		{"unicode escape", `"\u00e9\u4E16"`, "é世"},
		{"escaped NUL", `"a\u0000b"`, "a\x00b"},
		{"surrogate pair", `"\ud83d\ude00"`, "😀"},
		{"lone high surrogate", `"\ud83dx"`, "\uFFFDx"},
		{"lone high surrogate at end", `"\ud83d"`, "\uFFFD"},
		{"lone low surrogate", `"\ude00"`, "\uFFFD"},
		{"two high surrogates", `"\ud83d\ud83d\ude00"`, "\uFFFD😀"},
		{"high surrogate then other escape", `"\ud83d\u0041"`, "\uFFFDA"},
		{"high surrogate then short escape", `"\ud83d\n"`, "\uFFFD\n"},
		{"valid UTF-8 kept", "\"héllo 世界 😀\"", "héllo 世界 😀"},
		{"literal U+FFFD kept", "\"\uFFFD\"", "\uFFFD"},
		{"invalid byte", "\"a\xffb\"", "a\uFFFDb"},
		{"truncated sequence, one U+FFFD per byte", "\"\xe4\xb8\"", "\uFFFD\uFFFD"},
		{"UTF-8 encoded surrogate", "\"\xed\xa0\x80\"", "\uFFFD\uFFFD\uFFFD"},
		{"overlong encoding", "\"\xc0\xaf\"", "\uFFFD\uFFFD"},
		{"invalid UTF-8 after escape", "\"\\n\xff\"", "\n\uFFFD"},
		{"DEL is allowed", "\"\x7f\"", "\x7f"},

		// Containers.
		{"empty object", `{}`, map[string]any{}},
		{"empty list", `[]`, []any{}},
		{"empty list with space", `[ ]`, []any{}},
		{"nested", `{"a":{"b":[{},[],null]}}`, map[string]any{"a": map[string]any{"b": []any{map[string]any{}, []any{}, nil}}}},
		{"duplicate keys: last wins", `{"a":1,"b":2,"a":3}`, map[string]any{"a": int64(3), "b": int64(2)}},
		{"out of range number replaced by a duplicate key", `{"a":1e400,"a":1}`, map[string]any{"a": int64(1)}},
		{"out of range number inside a replaced value", `{"a":[{"b":-1e999}],"a":[]}`, map[string]any{"a": []any{}}},
		{"escaped keys", `{"a\u0062":1,"\u00e9":2}`, map[string]any{"ab": int64(1), "é": int64(2)}},
		{"empty key", `{"":1}`, map[string]any{"": int64(1)}},
		{"list of everything", `[1,-2.5,"s",true,false,null,{},[]]`, []any{int64(1), -2.5, "s", true, false, nil, map[string]any{}, []any{}}},
		{"many members", `{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"j":10}`, map[string]any{
			"a": int64(1), "b": int64(2), "c": int64(3), "d": int64(4), "e": int64(5),
			"f": int64(6), "g": int64(7), "h": int64(8), "i": int64(9), "j": int64(10)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := jsonvalue.Decode([]byte(tt.in))
			if err != nil {
				t.Fatalf("jsonvalue.Decode(%q): %v", tt.in, err)
			}
			if !identical(got, tt.want) {
				t.Fatalf("jsonvalue.Decode(%q) = %#v, want %#v", tt.in, got, tt.want)
			}
			ref, err := reference([]byte(tt.in), false)
			if err != nil {
				t.Fatalf("encoding/json refuses %q: %v", tt.in, err)
			}
			if !identical(got, ref) {
				t.Fatalf("jsonvalue.Decode(%q) = %#v, encoding/json gives %#v", tt.in, got, ref)
			}
		})
	}
}

func TestDecodeNormalize(t *testing.T) {
	tests := []struct {
		in   string
		want any
	}{
		{`1.0`, int64(1)},
		{`1e3`, int64(1000)},
		{`-0.0`, int64(0)},
		{`1e-400`, int64(0)},
		{`2.5`, 2.5},
		{`9007199254740991.0`, int64(1<<53 - 1)},
		{`9007199254740992.0`, float64(1 << 53)},
		{`1e300`, 1e300},
		{`9223372036854775807`, int64(math.MaxInt64)},
		{`[1.5e1,{"a":-2e0}]`, []any{int64(15), map[string]any{"a": int64(-2)}}},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := jsonvalue.Options{Normalize: true}.Decode([]byte(tt.in))
			if err != nil {
				t.Fatalf("jsonvalue.Decode(%q): %v", tt.in, err)
			}
			if !identical(got, tt.want) {
				t.Fatalf("jsonvalue.Decode(%q) = %#v, want %#v", tt.in, got, tt.want)
			}
			ref, err := reference([]byte(tt.in), true)
			if err != nil || !identical(got, ref) {
				t.Fatalf("jsonvalue.Decode(%q) = %#v, the webhook's former decoding gives %#v, %v", tt.in, got, ref, err)
			}
		})
	}
}

// TestDecodeErrors checks that every malformed input is refused, by encoding/json too,
// and that the messages (what and where) match testdata/errors.golden.
func TestDecodeErrors(t *testing.T) {
	inputs := []string{
		``,
		` `,
		`tru`,
		`trUe`,
		`nul`,
		`falsey`,
		`True`,
		`{`,
		`{"a"`,
		`{"a":`,
		`{"a":1`,
		`{"a":1,`,
		`{"a":1,}`,
		`{,}`,
		`{a:1}`,
		`{"a" 1}`,
		`{"a":1 "b":2}`,
		`{'a':1}`,
		`[`,
		`[1`,
		`[1,`,
		`[1,]`,
		`[,1]`,
		`[1 2]`,
		`[1}`,
		`{"a":1]`,
		`]`,
		`"abc`,
		`"a\`,
		`"\x"`,
		`"\'"`,
		`"\u12"`,
		`"\u12g4"`,
		`"\ud83d\u12"`,
		"\"a\nb\"",
		"\"\t\"",
		"\"\x00\"",
		`-`,
		`+1`,
		`01`,
		`-01`,
		`1.`,
		`.5`,
		`1.e3`,
		`1e`,
		`1e+`,
		`1E-x`,
		`0x10`,
		`NaN`,
		`Infinity`,
		`-Infinity`,
		`1e400`,
		`-1e400`,
		`[1,2,1e309]`,
		`{"a":{"b":1e999}}`,
		`{"a":1e400,"b":1e500}`,
		`{"a":1e400,"a":1,"b":[0,-1e400]}`,
		`[{"a":1e999,"a":0},1e400]`,
		`1 2`,
		`{} {}`,
		`{}x`,
		"true\x00",
		"\xef\xbb\xbf{}",
		"\v1",
		"\f1",
		"\u00a01",
		`// comment`,
		strings.Repeat("[", jsonvalue.MaxDepth+1) + strings.Repeat("]", jsonvalue.MaxDepth+1),
		strings.Repeat(`{"a":`, jsonvalue.MaxDepth+1) + "1" + strings.Repeat("}", jsonvalue.MaxDepth+1),
	}
	var golden strings.Builder
	for _, in := range inputs {
		_, err := jsonvalue.Decode([]byte(in))
		if err == nil {
			t.Errorf("jsonvalue.Decode(%.40q) accepted", in)
			continue
		}
		var se *jsonvalue.SyntaxError
		if !errors.As(err, &se) || se.Offset < 0 || se.Offset > len(in) {
			t.Errorf("jsonvalue.Decode(%.40q): %v is not a *jsonvalue.SyntaxError with an offset in the input", in, err)
		}
		if _, rerr := reference([]byte(in), false); rerr == nil {
			t.Errorf("jsonvalue.Decode(%.40q) refuses what encoding/json accepts: %v", in, err)
		}
		golden.WriteString(shorten(in) + "\n\t" + err.Error() + "\n")
	}
	checkGolden(t, "errors.golden", golden.String())
}

// shorten quotes an input for the golden file, eliding the middle of long ones.
func shorten(s string) string {
	if len(s) > 40 {
		return fmt.Sprintf("%q...%q (%d bytes)", s[:20], s[len(s)-10:], len(s))
	}
	return strconv.Quote(s)
}

func TestDepthLimit(t *testing.T) {
	for _, open := range []string{"[", `{"k":`} {
		closer := map[string]string{"[": "]", `{"k":`: "}"}[open]
		at := strings.Repeat(open, jsonvalue.MaxDepth) + "0" + strings.Repeat(closer, jsonvalue.MaxDepth)
		if _, err := jsonvalue.Decode([]byte(at)); err != nil {
			t.Errorf("%s nested %d deep: %v", open, jsonvalue.MaxDepth, err)
		}
		if _, err := reference([]byte(at), false); err != nil {
			t.Errorf("encoding/json refuses %s nested %d deep: %v", open, jsonvalue.MaxDepth, err)
		}
		// Far deeper than the limit: an error, never a stack overflow.
		deep := strings.Repeat(open, 1_000_000)
		if _, err := jsonvalue.Decode([]byte(deep)); err == nil || !strings.Contains(err.Error(), "exceeded max depth") {
			t.Errorf("%s nested a million deep: %v", open, err)
		}
	}
}

func TestDecodeObject(t *testing.T) {
	tests := []struct {
		in      string
		want    map[string]any
		wantErr string
	}{
		{in: `{"a":1}`, want: map[string]any{"a": int64(1)}},
		{in: ` {} `, want: map[string]any{}},
		{in: `null`, want: nil},
		{in: `[1]`, wantErr: "expected a JSON object, found a list"},
		{in: `"s"`, wantErr: "expected a JSON object, found a string"},
		{in: `true`, wantErr: "expected a JSON object, found a boolean"},
		{in: `1.5`, wantErr: "expected a JSON object, found a number"},
		{in: `{"a":1e400}`, wantErr: "number 1e400 is out of range at byte offset 5"},
		{in: `{`, wantErr: "unexpected end of JSON input at byte offset 1"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := jsonvalue.DecodeObject([]byte(tt.in))
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("jsonvalue.DecodeObject(%q) error %v, want %q", tt.in, err, tt.wantErr)
				}
				return
			}
			if err != nil || !identical(got, tt.want) || (got == nil) != (tt.want == nil) {
				t.Fatalf("jsonvalue.DecodeObject(%q) = %#v, %v; want %#v", tt.in, got, err, tt.want)
			}
		})
	}
}

// TestStringsDoNotAliasInput scribbles over the input after decoding it.
func TestStringsDoNotAliasInput(t *testing.T) {
	in := []byte(`{"key":"value","list":["a","b\n","é"],"n":12}`)
	got, err := jsonvalue.Decode(in)
	if err != nil {
		t.Fatal(err)
	}
	want, err := reference(in, false)
	if err != nil {
		t.Fatal(err)
	}
	for i := range in {
		in[i] = 'X'
	}
	if !identical(got, want) {
		t.Fatalf("after overwriting the input the value is %#v, want %#v", got, want)
	}
}

// TestGoldenFiles decodes testdata/*.json and compares a typed dump of the value with
// testdata/*.golden, and the value with encoding/json's.
func TestGoldenFiles(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no testdata/*.json: %v", err)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			for _, normalize := range []bool{false, true} {
				got, err := jsonvalue.Options{Normalize: normalize}.Decode(data)
				if err != nil {
					t.Fatal(err)
				}
				want, err := reference(data, normalize)
				if err != nil {
					t.Fatal(err)
				}
				if !identical(got, want) {
					t.Fatalf("normalize %v: differs from encoding/json:\n%s\nwant\n%s", normalize, dump(got), dump(want))
				}
				if !normalize {
					checkGolden(t, strings.TrimSuffix(filepath.Base(file), ".json")+".golden", dump(got))
				}
			}
		})
	}
}

func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs (go test -update rewrites it):\ngot:\n%s\nwant:\n%s", path, got, want)
	}
}
