package cel

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// TestKyvernoJMESPathFunctions checks each of Kyverno's JMESPath functions morph
// evaluates in GlobalContextEntry projections against the values Kyverno 1.19.1
// expects (pkg/engine/jmespath/functions_test.go and time_test.go).
func TestKyvernoJMESPathFunctions(t *testing.T) {
	for _, tt := range jmespathCases {
		t.Run(tt.query, func(t *testing.T) {
			got, err := searchJMESPath(tt.query, jsonValue(t, tt.data))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if g, w := asJSON(t, got), jsonValue(t, tt.want); !reflect.DeepEqual(g, w) {
				t.Fatalf("got %v, want %s", g, tt.want)
			}
		})
	}
}

// jsonValue decodes a JSON text ("" is null).
func jsonValue(t *testing.T, s string) any {
	t.Helper()
	var v any
	if s != "" {
		if err := json.Unmarshal([]byte(s), &v); err != nil {
			t.Fatal(err)
		}
	}
	return v
}

// asJSON is v as encoding/json values (Kyverno's compare answers an int).
func asJSON(t *testing.T, v any) any {
	t.Helper()
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	_ = json.Unmarshal(raw, &out)
	return out
}

// jmespathCases are Kyverno's functions with the values Kyverno expects; notKyverno
// marks the cases where morph answers differently by design (functions morph does not
// evaluate), left out of the differential test.
var jmespathCases = []struct {
	query      string
	data       string // JSON; null when empty
	want       string // JSON
	wantErr    string
	notKyverno bool
}{
	{query: "compare('a', 'a')", want: `0`},
	{query: "compare('a', 'b')", want: `-1`},
	{query: "compare('b', 'a')", want: `1`},
	{query: "equal_fold('Go', 'go')", want: `true`},
	{query: "equal_fold('1', 'b')", want: `false`},
	{query: "replace('Lorem ipsum ipsum ipsum dolor sit amet', 'ipsum', 'muspi', `-1`)", want: `"Lorem muspi muspi muspi dolor sit amet"`},
	{query: "replace('Lorem ipsum ipsum ipsum dolor sit amet', 'ipsum', 'muspi', `1`)", want: `"Lorem muspi ipsum ipsum dolor sit amet"`},
	{query: "replace_all('Lorem ipsum dolor sit amet', 'ipsum', 'muspi')", want: `"Lorem muspi dolor sit amet"`},
	{query: "to_upper('a#%&123Bc')", want: `"A#%&123BC"`},
	{query: "to_lower('a#%&123Bc')", want: `"a#%&123bc"`},
	{query: "trim('¡¡¡Hello, Gophers!!!', '!¡')", want: `"Hello, Gophers"`},
	{query: "trim_prefix('pre-name', 'pre-')", want: `"name"`},
	{query: "split('Hello, Gophers', ', ')", want: `["Hello", "Gophers"]`},
	{query: "regex_match('12.*', foo)", data: `{"foo": 123}`, want: `true`},
	{query: "regex_match('^a+$', 'aab')", want: `false`},
	{query: "regex_match('(', 'a')", wantErr: "missing closing )"},
	{query: "regex_replace_all('([Hh]e|G)l', spec.field, '${2}G')", data: `{"spec": {"field": "Hello world, helworldlo"}}`, want: `"Glo world, Gworldlo"`},
	{query: "regex_replace_all_literal('[Hh]el?', spec.field, 'G')", data: `{"spec": {"field": "Hello world, helworldlo"}}`, want: `"Glo world, Gworldlo"`},
	{query: "regex_replace_all('x', `1.5`, 'y')", want: `"1.5"`},
	{query: "label_match(`{\"app\": \"test-app\"}`, metadata.labels)", data: `{"metadata": {"labels": {"app": "test-app", "x": "y"}}}`, want: `true`},
	{query: "label_match(`{\"app\": \"other\"}`, metadata.labels)", data: `{"metadata": {"labels": {"app": "test-app"}}}`, want: `false`},
	{query: "to_boolean('TruE')", want: `true`},
	{query: "to_boolean('faLSE')", want: `false`},
	{query: "to_boolean('yes')", wantErr: "lowercase argument must be 'true' or 'false' (provided: 'yes')"},
	{query: "round(`3.14159`, `2`)", want: `3.14`},
	{query: "round(`3.5`, `0`)", want: `4`},
	{query: "round(`3.5`, `1.5`)", wantErr: "Non-integer argument(s) passed for round off"},
	{query: "base64_decode('SGVsbG8sIHdvcmxkIQ==')", want: `"Hello, world!"`},
	{query: "base64_encode('Hello, world!')", want: `"SGVsbG8sIHdvcmxkIQ=="`},
	{query: "path_canonicalize('/var/run///containerd////')", want: `"/var/run/containerd"`},
	{query: "path_canonicalize('/run/../etc')", want: `"/etc"`},
	{query: "truncate('Lorem ipsum dolor sit amet', `5`)", want: `"Lorem"`},
	{query: "truncate('Lorem ipsum', `2.6`)", want: `"Lo"`},
	{query: "truncate('Lorem ipsum', `-1`)", want: `""`},
	{query: "truncate('Lorem ipsum', `40`)", want: `"Lorem ipsum"`},
	{query: "semver_compare('4.1.3','>=4.1.x')", want: `true`},
	{query: "semver_compare('4.1.3','!4.x.x')", want: `false`},
	{query: "semver_compare('1.8.6','>1.0.0 <2.0.0')", want: `true`},
	{query: "semver_compare('2.1.5','<2.0.0 || >=3.0.0')", want: `false`},
	{query: "parse_json('{\"a\": [1, \"x\"]}')", want: `{"a": [1, "x"]}`},
	{query: "parse_yaml('a: [1, x]')", want: `{"a": [1, "x"]}`},
	{query: "lookup(`{\"key1\": \"value1\"}`, 'key1')", want: `"value1"`},
	{query: "lookup(`[7, \"x\", true]`, `1`)", want: `"x"`},
	{query: "lookup(`[7]`, `5`)", want: `null`},
	{query: "lookup(`[7]`, `1.5`)", wantErr: "JMESPath function 'lookup': argument #2: expected an integer number but got: 1.5"},
	{query: "lookup(`{\"a\": 1}`, `1`)", wantErr: "argument #2 is not of type String"},
	{query: "items(`{\"key2\": \"value2\", \"key1\": \"value1\"}`, 'myKey', 'myValue')", want: `[{"myKey": "key1", "myValue": "value1"}, {"myKey": "key2", "myValue": "value2"}]`},
	{query: "items(`[\"A\", \"B\"]`, 'myKey', 'myValue')", want: `[{"myKey": 0, "myValue": "A"}, {"myKey": 1, "myValue": "B"}]`},
	{query: "object_from_lists(`[\"a\", \"b\"]`, `[1]`)", want: `{"a": 1, "b": null}`},
	{query: "sha256('hello')", want: `"2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"`},
	{query: "sha1('hello')", want: `"aaf4c61ddcc5e8a2dabede0f3b482cd9aea9434d"`},
	{query: "md5('hello')", want: `"5d41402abc4b2a76b9719d911017c592"`},
	{query: "time_since('', '2021-01-02T15:04:05-07:00', '2021-01-10T03:14:05-07:00')", want: `"180h10m0s"`},
	{query: "time_since('Mon Jan _2 15:04:05 MST 2006', 'Mon Jan 02 15:04:05 MST 2021', 'Mon Jan 10 03:14:16 MST 2021')", want: `"180h10m11s"`},
	{query: "time_to_cron('2023-02-02T15:04:05Z')", want: `"4 15 2 2 4"`},
	{query: "time_to_cron(time_utc('2023-02-02T15:04:05-07:00'))", want: `"4 22 2 2 4"`},
	{query: "time_add('2021-01-02T15:04:05-07:00', '3h')", want: `"2021-01-02T18:04:05-07:00"`},
	{query: "time_add(time_parse('Mon Jan 02 15:04:05 -0700 2006', 'Sat Jan 02 15:04:05 -0700 2021'), '5h30m40s')", want: `"2021-01-02T20:34:45-07:00"`},
	{query: "time_parse('2006-01-02T15:04:05Z07:00', '2021-01-02T15:04:05-07:00')", want: `"2021-01-02T15:04:05-07:00"`},
	{query: "time_parse('1702691171', '1702691171')", want: `"2023-12-16T01:46:11Z"`},
	{query: "time_utc('2023-02-02T15:04:05-07:00')", want: `"2023-02-02T22:04:05Z"`},
	{query: "time_diff('2021-01-02T15:04:05-07:00', '2021-01-10T03:14:05-07:00')", want: `"180h10m0s"`},
	{query: "time_before('2021-01-02T15:04:05Z', '2021-01-02T16:04:05Z')", want: `true`},
	{query: "time_after('2021-01-02T15:04:05Z', '2021-01-02T16:04:05Z')", want: `false`},
	{query: "time_between('2021-01-02T17:04:05Z', '2021-01-02T16:04:05Z', '2021-01-02T18:04:05Z')", want: `true`},
	{query: "time_truncate('2023-02-02T15:04:05Z', '1h')", want: `"2023-02-02T15:00:00Z"`},
	// JMESPath's own functions stay as in Kyverno's fork.
	{query: "length(items)", data: `{"items": [1, 2]}`, want: `2`},
	{query: "starts_with('Gophers', 'Go')", want: `true`},
	// Kyverno's functions morph does not evaluate fail by name, never differ.
	{query: "add(`1`, `2`)", wantErr: "JMESPath function 'add': Kyverno's function is not implemented by morph", notKyverno: true},
	{query: "no_such_fn('a')", wantErr: "unknown function"},
}
