package suite

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"

	jsonpatch "github.com/evanphx/json-patch"
	"github.com/pmezard/go-difflib/difflib"
	"sigs.k8s.io/yaml"
)

// tidy removes what the Kyverno CLI's resource.Tidy removes before comparing: nulls,
// and maps and lists left empty once their nulls and empty members are gone.
func tidy(v any) any {
	switch t := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, e := range t {
			if e = tidy(e); e != nil {
				out[k] = e
			}
		}
		if len(out) == 0 {
			return nil
		}
		return out
	case []any:
		var out []any
		for _, e := range t {
			if e = tidy(e); e != nil {
				out = append(out, e)
			}
		}
		if len(out) == 0 {
			return nil
		}
		return out
	}
	return v
}

// equalKyverno compares an actual and an expected object as the Kyverno CLI does
// (resource.Compare with tidy): both tidied, then equal when the JSON merge patch from
// one to the other is empty. Lists compare whole and in order, numbers by value, and
// a field present on one side only is a difference.
func equalKyverno(actual, expected map[string]any) (bool, error) {
	a, err := json.Marshal(tidyObject(actual))
	if err != nil {
		return false, err
	}
	e, err := json.Marshal(tidyObject(expected))
	if err != nil {
		return false, err
	}
	patch, err := jsonpatch.CreateMergePatch(a, e)
	if err != nil {
		return false, err
	}
	return len(patch) == 2, nil
}

func tidyObject(obj map[string]any) map[string]any {
	t, _ := tidy(obj).(map[string]any)
	if t == nil {
		return map[string]any{}
	}
	return t
}

// equalExact compares two decoded JSON values exactly: every field, list order, numbers
// by value (1 and 1.0 are equal, as in JSON).
func equalExact(a, b any) bool {
	na, err1 := normalizeJSON(a)
	nb, err2 := normalizeJSON(b)
	return err1 == nil && err2 == nil && reflect.DeepEqual(na, nb)
}

func normalizeJSON(v any) (any, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var out any
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&out); err != nil {
		return nil, err
	}
	return canonicalNumbers(out), nil
}

// canonicalNumbers turns json.Numbers into float64 so that 1 and 1.0 compare equal.
func canonicalNumbers(v any) any {
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			t[k] = canonicalNumbers(e)
		}
	case []any:
		for i, e := range t {
			t[i] = canonicalNumbers(e)
		}
	case json.Number:
		f, err := t.Float64()
		if err != nil {
			return t.String()
		}
		return f
	}
	return v
}

// diff is a unified diff of the YAML of expected and actual.
func diff(expected, actual any) string {
	e, err1 := yaml.Marshal(expected)
	a, err2 := yaml.Marshal(actual)
	if err1 != nil || err2 != nil {
		return fmt.Sprintf("expected: %v\nactual: %v", expected, actual)
	}
	text, err := difflib.GetUnifiedDiffString(difflib.UnifiedDiff{
		A: difflib.SplitLines(string(e)), B: difflib.SplitLines(string(a)),
		FromFile: "expected", ToFile: "actual", Context: 3,
	})
	if err != nil {
		return err.Error()
	}
	return text
}
