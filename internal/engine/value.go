package engine

import (
	"encoding/json"
	"math"
)

// Equal reports whether two decoded JSON values are equal. Numbers compare by value
// whatever their Go type (int64, int, float64, json.Number), as JSON does.
func Equal(a, b any) bool {
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		if len(x) > 0 && mapID(x) == mapID(y) {
			return true
		}
		for k, xv := range x {
			yv, ok := y[k]
			if !ok || !Equal(xv, yv) {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		if len(x) > 0 && listID(x) == listID(y) {
			return true
		}
		for i := range x {
			if !Equal(x[i], y[i]) {
				return false
			}
		}
		return true
	case string:
		y, ok := b.(string)
		return ok && x == y
	case bool:
		y, ok := b.(bool)
		return ok && x == y
	case nil:
		return b == nil
	}
	xf, xok := number(a)
	yf, yok := number(b)
	if xok && yok {
		return xf == yf
	}
	return false
}

// number converts a JSON number of any decoded Go type to float64. Integers beyond
// 2^53 lose precision here, which only matters for equality of such huge values.
func number(v any) (float64, bool) {
	switch n := v.(type) {
	case int64:
		return float64(n), true
	case int:
		return float64(n), true
	case int32:
		return float64(n), true
	case float64:
		return n, true
	case float32:
		return float64(n), true
	case json.Number:
		f, err := n.Float64()
		return f, err == nil
	}
	return 0, false
}

// DeepCopy copies a decoded JSON value.
func DeepCopy(v any) any {
	switch x := v.(type) {
	case map[string]any:
		c := make(map[string]any, len(x))
		for k, e := range x {
			c[k] = DeepCopy(e)
		}
		return c
	case []any:
		c := make([]any, len(x))
		for i, e := range x {
			c[i] = DeepCopy(e)
		}
		return c
	}
	return v
}

// DeepCopyMap copies an object.
func DeepCopyMap(m map[string]any) map[string]any {
	if m == nil {
		return nil
	}
	return DeepCopy(m).(map[string]any)
}

// Normalize turns the numbers of a decoded value into int64 where they are whole and
// fit, float64 otherwise, in place, so that values decoded by different decoders
// compare and print alike.
func Normalize(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = Normalize(e)
		}
		return x
	case []any:
		for i, e := range x {
			x[i] = Normalize(e)
		}
		return x
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		if f, err := x.Float64(); err == nil {
			return f
		}
		// A number no float64 holds stays a json.Number, which encodes as written: it
		// must not silently become a string.
		return x
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1<<53 {
			return int64(x)
		}
		return x
	case int:
		return int64(x)
	}
	return v
}
