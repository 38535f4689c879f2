package katalog

import (
	"context"
	"encoding/json"
	"math"
	"math/big"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestFuncsUnicodeAndOverflow(t *testing.T) {
	tests := []struct {
		tmpl    string
		want    any
		wantErr string
	}{
		{`{{ title "émile zola" }}`, "Émile Zola", ""},
		{`{{ title "ǆemal" }}`, "ǅemal", ""},
		{`{{ trunc -9223372036854775808 "abc" }}`, "abc", ""},
		{`{{ trunc -2 "éàü" }}`, "àü", ""},
		{`{{ trunc 2 "éàü" }}`, "éà", ""},
		{`{{ mul 9223372036854775807 2 }}`, nil, "overflows"},
		{`{{ mul -1 -9223372036854775808 }}`, nil, "overflows"},
		{`{{ mul -9223372036854775808 -1 }}`, nil, "overflows"},
		{`{{ mul 3037000500 3037000500 }}`, nil, "overflows"},
		{`{{ mul 3037000499 3037000499 }}`, "9223372030926249001", ""},
		{`{{ add 9223372036854775807 1 }}`, nil, "overflows"},
		{`{{ add -9223372036854775808 -1 }}`, nil, "overflows"},
		{`{{ sub -9223372036854775808 1 }}`, nil, "overflows"},
		{`{{ sub 0 -9223372036854775808 }}`, nil, "overflows"},
		{`{{ div -9223372036854775808 -1 }}`, nil, "overflows"},
		{`{{ mod -9223372036854775808 -1 }}`, "0", ""},
		{`{{ int "1e300" }}`, nil, "does not fit"},
		{`{{ int "9.3e18" }}`, nil, "does not fit"},
		{`{{ int "-9.2e18" }}`, "-9200000000000000000", ""},
		{`{{ mul 1e300 1e300 }}`, nil, "overflows a float64"},
		{`{{ add "NaN" 1 }}`, nil, "not a number"},
		{`{{ int "Inf" }}`, nil, "not a number"},
		{`{{ uniq (list 1 1.0 "1" 2 (dict "a" 1) (dict "a" 1.0)) | toJson }}`, `[1,"1",2,{"a":1}]`, ""},
	}
	for _, tt := range tests {
		v, err := compileValue("x", tt.tmpl, Funcs())
		if err != nil {
			t.Fatalf("%s: %v", tt.tmpl, err)
		}
		got, err := v.Eval(context.Background(), nil, Budget{})
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%s: got %v, %v; want an error with %q", tt.tmpl, got, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("%s = %v, %v; want %v", tt.tmpl, got, err, tt.want)
		}
	}
}

// fuzzArgs are the values a fuzz input gives a function's parameters.
func fuzzArgs(s, s2 string, n int64, f float64) []any {
	vals := []any{s, s2, n, f, nil, true, []any{s, n, s2}, map[string]any{s: s2, "k": n}, []any{}}
	var j any
	if json.Unmarshal([]byte(s), &j) == nil {
		vals = append(vals, j)
	}
	return vals
}

// FuzzFuncs calls every library function with values made from the fuzz input: none
// may panic, integer arithmetic is exact or an error, and string functions keep valid
// UTF-8 valid.
func FuzzFuncs(f *testing.F) {
	f.Add("émile zola", "é", int64(math.MinInt64), 1.5, uint8(0), uint8(0))
	f.Add("a,b,c", ",", int64(math.MaxInt64), math.Copysign(0, -1), uint8(1), uint8(2))
	f.Add(`{"a":[1,2]}`, "", int64(-1), 1e308, uint8(3), uint8(5))
	f.Add("ǆ\xffx", "\u0130", int64(3037000500), math.NaN(), uint8(7), uint8(1))
	lib := Funcs()
	names := make([]string, 0, len(lib))
	for name := range lib {
		names = append(names, name)
	}
	slices.Sort(names)
	f.Fuzz(func(t *testing.T, s, s2 string, n int64, fl float64, which, pick uint8) {
		name := names[int(which)%len(names)]
		fv := reflect.ValueOf(lib[name])
		ft := fv.Type()
		vals := fuzzArgs(s, s2, n, fl)
		var args []reflect.Value
		for i := range ft.NumIn() {
			pt := ft.In(i)
			if ft.IsVariadic() && i == ft.NumIn()-1 {
				pt = pt.Elem()
			}
			var v reflect.Value
			switch pt.Kind() {
			case reflect.Int:
				v = reflect.ValueOf(int(n))
			case reflect.String:
				v = reflect.ValueOf(s)
			case reflect.Bool:
				v = reflect.ValueOf(pick%2 == 0)
			case reflect.Slice:
				v = reflect.ValueOf([]any{s, n, s2})
			case reflect.Map:
				v = reflect.ValueOf(map[string]any{s: s2})
			default:
				v = reflect.ValueOf(vals[(int(pick)+i)%len(vals)])
				if !v.IsValid() {
					v = reflect.Zero(pt)
				}
			}
			args = append(args, v)
		}
		res := fv.Call(args) // a panic fails the fuzz run
		if len(res) == 0 {
			return
		}
		if out, ok := res[0].Interface().(string); ok && utf8.ValidString(s) && utf8.ValidString(s2) && name != "b64dec" && name != "slice" {
			if !utf8.ValidString(out) {
				t.Errorf("%s made invalid UTF-8 %q from valid input", name, out)
			}
		}
	})
}

// FuzzArith checks integer arithmetic against math/big: exact or an overflow error.
func FuzzArith(f *testing.F) {
	f.Add(int64(math.MaxInt64), int64(1))
	f.Add(int64(math.MinInt64), int64(-1))
	f.Add(int64(3037000500), int64(3037000500))
	f.Fuzz(func(t *testing.T, a, b int64) {
		for _, op := range []string{"add", "sub", "mul", "div"} {
			got, err := arith(op, a, b)
			x, y := big.NewInt(a), big.NewInt(b)
			var want *big.Int
			switch op {
			case "add":
				want = new(big.Int).Add(x, y)
			case "sub":
				want = new(big.Int).Sub(x, y)
			case "mul":
				want = new(big.Int).Mul(x, y)
			case "div":
				if b == 0 {
					continue
				}
				want = new(big.Int).Quo(x, y)
			}
			if !want.IsInt64() {
				if err == nil {
					t.Errorf("%s %d %d = %v, want an overflow error", op, a, b, got)
				}
				continue
			}
			if err != nil || got != want.Int64() {
				t.Errorf("%s %d %d = %v, %v; want %d", op, a, b, got, err, want.Int64())
			}
		}
	})
}
