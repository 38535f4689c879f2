package katalog

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/template"
	"unicode"
	"unicode/utf8"

	"github.com/morph-dev/morph/internal/engine"
)

// maxRepeat bounds the output of repeat, so that a template cannot exhaust memory.
const maxRepeat = 1 << 16

// Funcs returns the template function library. It is hermetic: no function reads the
// environment, files, the network, the clock or a random source, so that the same object
// always gives the same result. Besides text/template's built-ins (and, or, not, len,
// index, slice, print, printf, println, eq, ne, lt, le, gt, ge, html, js, urlquery) it
// holds:
//
//   - values: default DEFAULT VALUE, empty V, coalesce V..., ternary A B COND,
//     field OBJ KEY... (a field of OBJ, "" when absent), toString V
//   - strings: upper, lower, title, trim, trimPrefix PREFIX S, trimSuffix SUFFIX S,
//     trimAll CUTSET S, replace OLD NEW S, contains SUB S, hasPrefix PREFIX S,
//     hasSuffix SUFFIX S, quote, squote, split SEP S (a list), join SEP LIST,
//     repeat N S, substr START END S, trunc N S, nospace
//   - lists and maps: list V..., first, last, rest, append LIST V, has V LIST, uniq,
//     sortAlpha, reverse, dict K V ..., get MAP KEY, hasKey MAP KEY, keys MAP
//   - math (integers stay int64, any float makes the result float64): add, sub, mul,
//     div, mod, max, min, int, float, atoi
//   - encoding: b64enc, b64dec, toJson, fromJson, sha256sum
//   - cron: cronToMap, cronFromMap, cronFromAny (see cron.go)
//
// "Empty", for default, empty and coalesce, is what a default rule treats as empty:
// absent (nil), "", an empty map or an empty list; 0 and false are values.
func Funcs() template.FuncMap {
	return template.FuncMap{
		fnField: fieldOf,
		fnText:  printed,
		fnTyped: typedJSON,
		// Unbounded forms of the budget's hooks; Value.Eval binds bounded ones.
		fnRange: func(_ int, v any) (any, error) { return v, nil },
		fnStep:  func(v any) any { return v },

		"default":  defaultValue,
		"empty":    isEmpty,
		"coalesce": coalesce,
		"ternary": func(a, b any, cond bool) any {
			if cond {
				return a
			}
			return b
		},
		"toString": printed,

		"upper":      func(v any) string { return strings.ToUpper(printed(v)) },
		"lower":      func(v any) string { return strings.ToLower(printed(v)) },
		"title":      title,
		"trim":       func(v any) string { return strings.TrimSpace(printed(v)) },
		"trimPrefix": func(p, v any) string { return strings.TrimPrefix(printed(v), printed(p)) },
		"trimSuffix": func(s, v any) string { return strings.TrimSuffix(printed(v), printed(s)) },
		"trimAll":    func(c, v any) string { return strings.Trim(printed(v), printed(c)) },
		"replace":    func(o, n, v any) string { return strings.ReplaceAll(printed(v), printed(o), printed(n)) },
		"contains":   func(sub, v any) bool { return strings.Contains(printed(v), printed(sub)) },
		"hasPrefix":  func(p, v any) bool { return strings.HasPrefix(printed(v), printed(p)) },
		"hasSuffix":  func(s, v any) bool { return strings.HasSuffix(printed(v), printed(s)) },
		"quote":      func(v any) string { return strconv.Quote(printed(v)) },
		"squote":     func(v any) string { return "'" + printed(v) + "'" },
		"split":      split,
		"join":       join,
		"repeat":     repeat,
		"substr":     substr,
		"trunc":      trunc,
		"nospace":    func(v any) string { return strings.Join(strings.Fields(printed(v)), "") },

		"list":   func(vs ...any) []any { return append([]any{}, vs...) },
		"first":  func(l []any) any { return listAt(l, 0) },
		"last":   func(l []any) any { return listAt(l, len(l)-1) },
		"rest":   rest,
		"append": func(l []any, v any) []any { return append(slices.Clip(l), v) },
		"has": func(v any, l []any) bool {
			return slices.ContainsFunc(l, func(e any) bool { return engine.Equal(e, v) })
		},
		"uniq":      uniq,
		"sortAlpha": sortAlpha,
		"reverse":   func(l []any) []any { r := slices.Clone(l); slices.Reverse(r); return r },
		"dict":      dict,
		"get":       func(m map[string]any, k string) any { return fieldOf(m, k) },
		"hasKey":    func(m map[string]any, k string) bool { _, ok := m[k]; return ok },
		"keys":      keys,

		"add":   func(a any, more ...any) (any, error) { return fold("add", a, more) },
		"mul":   func(a any, more ...any) (any, error) { return fold("mul", a, more) },
		"sub":   func(a, b any) (any, error) { return arith("sub", a, b) },
		"div":   func(a, b any) (any, error) { return arith("div", a, b) },
		"mod":   func(a, b any) (any, error) { return arith("mod", a, b) },
		"max":   func(a any, more ...any) (any, error) { return fold("max", a, more) },
		"min":   func(a any, more ...any) (any, error) { return fold("min", a, more) },
		"int":   toInt,
		"atoi":  toInt,
		"float": toFloat,

		"b64enc":    func(v any) string { return base64.StdEncoding.EncodeToString([]byte(printed(v))) },
		"b64dec":    b64dec,
		"toJson":    toJSON,
		"fromJson":  fromJSON,
		"sha256sum": func(v any) string { s := sha256.Sum256([]byte(printed(v))); return hex.EncodeToString(s[:]) },

		"cronToMap":   cronToMap,
		"cronFromMap": cronFromMap,
		"cronFromAny": cronFromAny,
	}
}

// isEmpty is the emptiness of default rules: nil, "", an empty map or list.
func isEmpty(v any) bool {
	switch x := v.(type) {
	case nil:
		return true
	case string:
		return x == ""
	case map[string]any:
		return len(x) == 0
	case []any:
		return len(x) == 0
	}
	return false
}

// defaultValue is default DEFAULT VALUE: VALUE unless it is empty. In a pipeline,
// {{ .spec.version | default "latest" }}, the piped value comes last.
func defaultValue(def any, v ...any) any {
	if len(v) == 0 || isEmpty(v[0]) {
		return def
	}
	return v[0]
}

func coalesce(vs ...any) any {
	for _, v := range vs {
		if !isEmpty(v) {
			return v
		}
	}
	return ""
}

// title upper-cases (title-cases) the first letter of each word, a rune, not a byte:
// "émile zola" is "Émile Zola". Words are separated by single spaces in the result.
func title(v any) string {
	words := strings.Fields(printed(v))
	for i, w := range words {
		r, size := utf8.DecodeRuneInString(w)
		if r == utf8.RuneError && size <= 1 {
			continue // not UTF-8: left as it is
		}
		words[i] = string(unicode.ToTitle(r)) + w[size:]
	}
	return strings.Join(words, " ")
}

func split(sep, v any) []any {
	parts := strings.Split(printed(v), printed(sep))
	out := make([]any, len(parts))
	for i, p := range parts {
		out[i] = p
	}
	return out
}

func join(sep any, l any) (string, error) {
	switch x := l.(type) {
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = printed(e)
		}
		return strings.Join(parts, printed(sep)), nil
	case []string:
		return strings.Join(x, printed(sep)), nil
	case string:
		return x, nil
	}
	return "", fmt.Errorf("%s is not a list", describe(l))
}

func repeat(n int, v any) (string, error) {
	s := printed(v)
	if n < 0 || (len(s) > 0 && n > maxRepeat/len(s)) {
		return "", fmt.Errorf("%d copies of %d bytes is out of bounds (at most %d bytes)", n, len(s), maxRepeat)
	}
	return strings.Repeat(s, n), nil
}

func substr(start, end int, v any) string {
	r := []rune(printed(v))
	start = max(0, min(start, len(r)))
	if end < 0 || end > len(r) {
		end = len(r)
	}
	if end < start {
		return ""
	}
	return string(r[start:end])
}

func trunc(n int, v any) string {
	r := []rune(printed(v))
	switch {
	case n >= 0 && n < len(r):
		return string(r[:n])
	case n < 0 && n > -len(r): // not -n, which overflows for the smallest int
		return string(r[len(r)+n:])
	}
	return string(r)
}

func listAt(l []any, i int) any {
	if i < 0 || i >= len(l) {
		return ""
	}
	return l[i]
}

func rest(l []any) []any {
	if len(l) == 0 {
		return []any{}
	}
	return slices.Clone(l[1:])
}

// uniq keeps the first of equal elements (equal as engine.Equal has it: 1 and 1.0 are
// equal). It keys each element by its canonical form, so that it takes time linear in
// the list's size rather than quadratic.
func uniq(l []any) []any {
	out := make([]any, 0, len(l))
	seen := make(map[string]bool, len(l))
	var b strings.Builder
	for _, e := range l {
		b.Reset()
		canonicalKey(&b, e)
		if k := b.String(); !seen[k] {
			seen[k] = true
			out = append(out, e)
		}
	}
	return out
}

// canonicalKey writes a form of v that is equal for values engine.Equal finds equal.
func canonicalKey(b *strings.Builder, v any) {
	switch x := v.(type) {
	case nil:
		b.WriteString("z")
	case string:
		b.WriteString("s")
		b.WriteString(strconv.Quote(x))
	case bool:
		b.WriteString("b")
		b.WriteString(strconv.FormatBool(x))
	case map[string]any:
		ks := make([]string, 0, len(x))
		for k := range x {
			ks = append(ks, k)
		}
		slices.Sort(ks)
		b.WriteString("{")
		for _, k := range ks {
			b.WriteString(strconv.Quote(k))
			b.WriteString(":")
			canonicalKey(b, x[k])
			b.WriteString(",")
		}
		b.WriteString("}")
	case []any:
		b.WriteString("[")
		for _, e := range x {
			canonicalKey(b, e)
			b.WriteString(",")
		}
		b.WriteString("]")
	default:
		if _, f, _, err := numberOf(v); err == nil {
			if f == 0 {
				f = 0 // -0 equals 0
			}
			b.WriteString("n")
			b.WriteString(strconv.FormatFloat(f, 'g', -1, 64))
			return
		}
		fmt.Fprintf(b, "%T:%v", v, v)
	}
}

func sortAlpha(l []any) []any {
	out := slices.Clone(l)
	slices.SortStableFunc(out, func(a, b any) int { return strings.Compare(printed(a), printed(b)) })
	return out
}

func dict(kv ...any) (map[string]any, error) {
	if len(kv)%2 != 0 {
		return nil, errors.New("give key and value pairs")
	}
	m := make(map[string]any, len(kv)/2)
	for i := 0; i < len(kv); i += 2 {
		m[printed(kv[i])] = kv[i+1]
	}
	return m, nil
}

func keys(m map[string]any) []any {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	out := make([]any, len(ks))
	for i, k := range ks {
		out[i] = k
	}
	return out
}

// numberOf reads a number from a decoded value or a numeric string.
func numberOf(v any) (i int64, f float64, isInt bool, err error) {
	switch x := v.(type) {
	case int64:
		return x, float64(x), true, nil
	case int:
		return int64(x), float64(x), true, nil
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return 0, 0, false, fmt.Errorf("%v is not a finite number", x)
		}
		return 0, x, false, nil
	case string:
		s := strings.TrimSpace(x)
		if n, err := strconv.ParseInt(s, 10, 64); err == nil {
			return n, float64(n), true, nil
		}
		if g, err := strconv.ParseFloat(s, 64); err == nil && !math.IsNaN(g) && !math.IsInf(g, 0) {
			return 0, g, false, nil
		}
	}
	return 0, 0, false, fmt.Errorf("%s is not a number", quoteValue(v))
}

func quoteValue(v any) string {
	if s, ok := v.(string); ok {
		return strconv.Quote(s)
	}
	return describe(v)
}

func fold(op string, a any, more []any) (any, error) {
	acc := a
	if _, _, _, err := numberOf(a); err != nil {
		return nil, err
	}
	for _, b := range more {
		var err error
		if acc, err = arith(op, acc, b); err != nil {
			return nil, err
		}
	}
	ai, af, aInt, _ := numberOf(acc)
	if aInt {
		return ai, nil
	}
	return af, nil
}

func arith(op string, a, b any) (any, error) {
	ai, af, aInt, err := numberOf(a)
	if err != nil {
		return nil, err
	}
	bi, bf, bInt, err := numberOf(b)
	if err != nil {
		return nil, err
	}
	if aInt && bInt {
		switch op {
		case "add":
			if r := ai + bi; (r > ai) == (bi > 0) {
				return r, nil
			}
			return nil, overflow(op, ai, bi)
		case "sub":
			if r := ai - bi; (r < ai) == (bi > 0) {
				return r, nil
			}
			return nil, overflow(op, ai, bi)
		case "mul":
			if ai == 0 || bi == 0 {
				return int64(0), nil
			}
			r := ai * bi
			if r/bi != ai || (ai == -1 && bi == math.MinInt64) || (bi == -1 && ai == math.MinInt64) {
				return nil, overflow(op, ai, bi)
			}
			return r, nil
		case "max":
			return max(ai, bi), nil
		case "min":
			return min(ai, bi), nil
		case "div", "mod":
			if bi == 0 {
				return nil, errors.New("division by zero")
			}
			if op == "div" {
				if ai == math.MinInt64 && bi == -1 {
					return nil, overflow(op, ai, bi)
				}
				return ai / bi, nil
			}
			if bi == -1 {
				return int64(0), nil
			}
			return ai % bi, nil
		}
	}
	var r float64
	switch op {
	case "add":
		r = af + bf
	case "sub":
		r = af - bf
	case "mul":
		r = af * bf
	case "max":
		r = math.Max(af, bf)
	case "min":
		r = math.Min(af, bf)
	case "div", "mod":
		if bf == 0 {
			return nil, errors.New("division by zero")
		}
		if op == "div" {
			r = af / bf
		} else {
			r = math.Mod(af, bf)
		}
	default:
		return nil, fmt.Errorf("unknown operation %s", op)
	}
	if math.IsInf(r, 0) || math.IsNaN(r) {
		return nil, fmt.Errorf("%s %v %v overflows a float64", op, af, bf)
	}
	return r, nil
}

func overflow(op string, a, b int64) error {
	return fmt.Errorf("%s %d %d overflows a 64-bit integer", op, a, b)
}

func toInt(v any) (int64, error) {
	i, f, isInt, err := numberOf(v)
	if err != nil {
		return 0, err
	}
	if !isInt {
		t := math.Trunc(f)
		// float64(math.MaxInt64) is 2^63, which does not fit.
		if t < math.MinInt64 || t >= math.MaxInt64 {
			return 0, fmt.Errorf("%v does not fit a 64-bit integer", f)
		}
		return int64(t), nil
	}
	return i, nil
}

func toFloat(v any) (float64, error) {
	_, f, _, err := numberOf(v)
	return f, err
}

func b64dec(v any) (string, error) {
	b, err := base64.StdEncoding.DecodeString(printed(v))
	if err != nil {
		return "", fmt.Errorf("%w", err)
	}
	return string(b), nil
}

func toJSON(v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("%w", err)
	}
	return string(b), nil
}

func fromJSON(v any) (any, error) {
	dec := json.NewDecoder(strings.NewReader(printed(v)))
	dec.UseNumber()
	var out any
	if err := dec.Decode(&out); err != nil {
		return nil, fmt.Errorf("%w", err)
	}
	return engine.Normalize(out), nil
}
