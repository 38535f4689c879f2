package jsonvalue_test

import (
	"github.com/morph-dev/morph/internal/jsonvalue"
	"os"
	"path/filepath"
	"testing"
)

// FuzzDecodeMatchesEncodingJSON checks, for any input, that Decode accepts exactly what
// encoding/json (with UseNumber and the json.Number conversion, 1e400 refused) accepts
// and gives the identical value, in both number modes; that DecodeObject agrees with
// Decode; and that the value does not change when the input is overwritten afterwards.
func FuzzDecodeMatchesEncodingJSON(f *testing.F) {
	seeds := []string{
		`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a","labels":{"x":"y"}},"spec":{"containers":[{"name":"c","image":"i","ports":[{"containerPort":8080}]}]}}`,
		`[0,-0,1.0,1e3,-0.0,1e-400,9223372036854775807,-9223372036854775808,9223372036854775808,1e400]`,
		`"\ud83d\ude00\ud83d\u0041\ude00\u00e9\n\t\"\\\/\b\f\r"`,
		"\"\xff\xe4\xb8\xed\xa0\x80\xc0\xaf\xef\xbf\xbd\"",
		`{"a":1,"a":2,"":{"":[]}}`,
		` {"a" : [ true , false , null ] } `,
		`{"a":1}x`, `[1,]`, `01`, `1.`, `"\u12"`, `{"a"}`, `nul`, "\"\x01\"",
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	addFileSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, normalize := range []bool{false, true} {
			want, werr := reference(data, normalize)
			in := append([]byte(nil), data...)
			got, gerr := jsonvalue.Options{Normalize: normalize}.Decode(in)
			if (gerr == nil) != (werr == nil) {
				t.Fatalf("normalize %v: %q: jsonvalue error %v, encoding/json error %v", normalize, data, gerr, werr)
			}
			if gerr != nil {
				continue
			}
			for i := range in {
				in[i] = 0
			}
			if !identical(got, want) {
				t.Fatalf("normalize %v: %q:\njsonvalue     %#v\nencoding/json %#v", normalize, data, got, want)
			}
			obj, oerr := jsonvalue.Options{Normalize: normalize}.DecodeObject(data)
			m, isObject := got.(map[string]any)
			switch {
			case got == nil:
				if obj != nil || oerr != nil {
					t.Fatalf("jsonvalue.DecodeObject(null) = %v, %v", obj, oerr)
				}
			case isObject:
				if oerr != nil || !identical(obj, m) {
					t.Fatalf("jsonvalue.DecodeObject(%q) = %v, %v; Decode gives %v", data, obj, oerr, m)
				}
			default:
				if oerr == nil {
					t.Fatalf("jsonvalue.DecodeObject(%q) accepts %T", data, got)
				}
			}
		}
	})
}

// addFileSeeds adds the JSON files of testdata and of the benchmark workload to a fuzz
// target's corpus.
func addFileSeeds(f *testing.F) {
	for _, pattern := range []string{"testdata/*.json", "../../bench/testdata/gatekeeper-workload/*.json"} {
		files, _ := filepath.Glob(pattern)
		for _, file := range files {
			if data, err := os.ReadFile(file); err == nil {
				f.Add(data)
			}
		}
	}
}
