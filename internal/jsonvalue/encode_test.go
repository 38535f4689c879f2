package jsonvalue_test

import (
	"bytes"
	"encoding/json"
	"github.com/morph-dev/morph/internal/jsonvalue"
	"math"
	"testing"
)

func TestAppendMatchesMarshal(t *testing.T) {
	tests := []struct {
		name  string
		value any
	}{
		{"nil", nil},
		{"strings", []any{"", "plain", "quote \" backslash \\ slash /", "<html> & </html>", "\b\f\n\r\t\x00\x1f\x7f", "\u2028\u2029", "é😀", "\xff\xfe bad \xc0\xaf utf-8", "\xed\xa0\x80"}},
		{"numbers", []any{int64(0), int64(-1), int64(math.MaxInt64), int64(math.MinInt64), 7, 1.5, 1e21, 1e-7, math.Copysign(0, -1), float64(1 << 53)}},
		{"bools", []any{true, false}},
		{"nested", map[string]any{"b": []any{map[string]any{}, []any{}}, "a": map[string]any{"z": nil, "y": "x"}, "": int64(1)}},
		{"nil containers", map[string]any{"m": map[string]any(nil), "l": []any(nil)}},
		{"many keys", map[string]any{"k01": 1, "k02": 2, "k03": 3, "k04": 4, "k05": 5, "k06": 6, "k07": 7, "k08": 8, "k09": 9, "k10": 10, "k11": 11, "k12": 12, "k13": 13, "k14": 14, "k15": 15, "k16": 16, "k17": 17, "k18": 18}},
		{"other types", []any{json.Number("12"), map[string]string{"a": "b"}, []string{"x"}, float32(1.5)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want, err := json.Marshal(tt.value)
			if err != nil {
				t.Fatal(err)
			}
			got, err := jsonvalue.Append([]byte("prefix"), tt.value)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, append([]byte("prefix"), want...)) {
				t.Errorf("Append:\n got %s\nwant prefix%s", got, want)
			}
		})
	}
}

func TestAppendErrors(t *testing.T) {
	for _, v := range []any{math.NaN(), []any{math.Inf(1)}, map[string]any{"f": func() {}}} {
		if _, err := jsonvalue.Append(nil, v); err == nil {
			t.Errorf("jsonvalue.Append(%#v): no error, json.Marshal fails", v)
		}
	}
}

// FuzzAppendMatchesMarshal checks, for any JSON input decoded into the value model, that
// Append writes exactly what json.Marshal writes.
func FuzzAppendMatchesMarshal(f *testing.F) {
	for _, s := range []string{`{"a":"<\u2028>","b":[1,2.5,-0,1e21,null,true]}`, "\"\xff\"", `{"z":{},"y":[]}`} {
		f.Add([]byte(s))
	}
	addFileSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, normalize := range []bool{false, true} {
			v, err := jsonvalue.Options{Normalize: normalize}.Decode(data)
			if err != nil {
				return
			}
			want, werr := json.Marshal(v)
			got, gerr := jsonvalue.Append(nil, v)
			if (gerr == nil) != (werr == nil) || !bytes.Equal(got, want) {
				t.Fatalf("%q:\nAppend       %s (%v)\njson.Marshal %s (%v)", data, got, gerr, want, werr)
			}
		}
	})
}
