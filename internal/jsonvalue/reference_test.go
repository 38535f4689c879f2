package jsonvalue_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strings"

	"github.com/morph-dev/morph/internal/engine"
)

// reference decodes data the way the webhook did before this package: encoding/json
// with UseNumber, then every json.Number through json.Number.Int64, else
// json.Number.Float64 (an error if that fails), and with normalize the float64 through
// engine.Normalize.
func reference(data []byte, normalize bool) (any, error) {
	if !json.Valid(data) {
		return nil, errors.New("encoding/json: not valid JSON")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("encoding/json: %w", err)
	}
	return convertNumbers(v, normalize)
}

func convertNumbers(v any, normalize bool) (any, error) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			c, err := convertNumbers(e, normalize)
			if err != nil {
				return nil, err
			}
			x[k] = c
		}
	case []any:
		for i, e := range x {
			c, err := convertNumbers(e, normalize)
			if err != nil {
				return nil, err
			}
			x[i] = c
		}
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i, nil
		}
		f, err := x.Float64()
		if err != nil {
			return nil, fmt.Errorf("number %s is out of range", x)
		}
		if normalize {
			return engine.Normalize(f), nil
		}
		return f, nil
	}
	return v, nil
}

// identical is reflect.DeepEqual, stricter on floats: the same bits (so -0 is not 0).
func identical(a, b any) bool {
	if !reflect.DeepEqual(a, b) {
		return false
	}
	switch x := a.(type) {
	case map[string]any:
		y := b.(map[string]any)
		for k, e := range x {
			if !identical(e, y[k]) {
				return false
			}
		}
	case []any:
		y := b.([]any)
		for i, e := range x {
			if !identical(e, y[i]) {
				return false
			}
		}
	case float64:
		return math.Float64bits(x) == math.Float64bits(b.(float64))
	}
	return true
}

// dump prints a decoded value one leaf per line, as JSON pointer, Go type and value,
// sorted, so that goldens show the types the decoder chose.
func dump(v any) string {
	var lines []string
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch x := v.(type) {
		case map[string]any:
			if len(x) == 0 {
				lines = append(lines, path+" map{}")
			}
			for k, e := range x {
				walk(engine.AppendPointer(path, k), e)
			}
		case []any:
			if len(x) == 0 {
				lines = append(lines, path+" list[]")
			}
			for i, e := range x {
				walk(fmt.Sprintf("%s/%d", path, i), e)
			}
		default:
			lines = append(lines, fmt.Sprintf("%s %T %#v", path, v, v))
		}
	}
	walk("", v)
	sort.Strings(lines)
	return strings.Join(lines, "\n") + "\n"
}
