package cel

import (
	"context"
	"encoding/json"
	"net"
	"reflect"
	"strings"
	"testing"

	"github.com/kyverno/go-jmespath"
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

// jmespathCases are Kyverno's functions with the values Kyverno 1.19.1 answers (its
// tests and its own JMESPath, the oracle of TestKyvernoJMESPathDifferential, which
// runs every one of them again); wantErr is Kyverno's message.
var jmespathCases = []struct {
	query   string
	data    string // JSON; null when empty
	want    string // JSON
	wantErr string
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
	// Arithmetic: numbers, quantities ("1m" is a thousandth), durations, mixed pairs.
	{query: "add(`12`, `13`)", want: `25`},
	{query: "add('12', '13s')", wantErr: "JMESPath function 'add': Types mismatch"},
	{query: "add(`12`, '13Ki')", wantErr: "JMESPath function 'add': Types mismatch"},
	{query: "add('12Ki', '13Ki')", want: `"25Ki"`},
	{query: "add('12Ki', '13')", want: `"12301"`},
	{query: "add('12s', '13s')", want: `"25s"`},
	{query: "add('1h', '30m')", wantErr: "JMESPath function 'add': Types mismatch"},
	{query: "add('1m', '1m')", want: `"2m"`},
	{query: "add('1.5Gi', '512Mi')", want: `"2Gi"`},
	{query: "add('100m', '1')", want: `"1100m"`},
	{query: "add('1e3', '1k')", want: `"2e3"`},
	{query: "add('0', '10Mi')", want: `"10Mi"`},
	{query: "add('10Mi', '0')", want: `"10Mi"`},
	{query: "add(`1.5`, `-3.25`)", want: `-1.75`},
	{query: "add(`null`, `1`)", wantErr: "JMESPath function 'add': invalid operand"},
	{query: "add('abc', `1`)", wantErr: "JMESPath function 'add': invalid operand"},
	{query: "add(`true`, `1`)", wantErr: "JMESPath function 'add': invalid operand"},
	{query: "add(`1`, `[1]`)", wantErr: "JMESPath function 'add': invalid operand"},
	{query: "add('1h', `1`)", wantErr: "JMESPath function 'add': Types mismatch"},
	{query: "subtract(`12`, `13`)", want: `-1`},
	{query: "subtract('12Ki', '13Ki')", want: `"-1Ki"`},
	{query: "subtract('12Ki', '13')", want: `"12275"`},
	{query: "subtract('12s', '13s')", want: `"-1s"`},
	{query: "subtract('1h', '90m')", wantErr: "JMESPath function 'subtract': Types mismatch"},
	{query: "subtract('1Gi', '1Mi')", want: `"1023Mi"`},
	{query: "subtract('1', '500m')", want: `"500m"`},
	{query: "subtract('12s', `13`)", wantErr: "JMESPath function 'subtract': Types mismatch"},
	{query: "subtract('x', '1s')", wantErr: "JMESPath function 'subtract': invalid operand"},
	{query: "multiply('12Ki', `2`)", want: `"24Ki"`},
	{query: "multiply('12Ki', '12Ki')", wantErr: "JMESPath function 'multiply': Types mismatch"},
	{query: "multiply('12Ki', '12')", wantErr: "JMESPath function 'multiply': Types mismatch"},
	{query: "multiply('12Ki', '12s')", wantErr: "JMESPath function 'multiply': Types mismatch"},
	{query: "multiply('12s', `2`)", want: `"24s"`},
	{query: "multiply('12s', '12')", wantErr: "JMESPath function 'multiply': Types mismatch"},
	{query: "multiply(`2.5`, `2.5`)", want: `6.25`},
	{query: "multiply(`2.5`, '12Ki')", want: `"30Ki"`},
	{query: "multiply(`2.5`, '12')", want: `"30"`},
	{query: "multiply(`2.5`, '40s')", want: `"1m40s"`},
	{query: "multiply('100m', `0.5`)", want: `"50m"`},
	{query: "multiply('1Gi', `1.5`)", want: `"1536Mi"`},
	{query: "multiply('1Gi', `0.1`)", want: `"107374182400m"`},
	{query: "multiply('250m', `3`)", want: `"750m"`},
	{query: "multiply('1h', `0.5`)", want: `"30m0s"`},
	{query: "multiply('1h30m', `-2`)", want: `"-3h0m0s"`},
	{query: "multiply('1e3', `1000000`)", want: `"1e9"`},
	{query: "multiply('10Mi', `1e21`)", want: `"9536743164062500Ti"`},
	{query: "multiply('1', `1e-7`)", want: `"100n"`},
	{query: "divide('256M', '256M')", want: `1`},
	{query: "divide('512M', '256M')", want: `2`},
	{query: "divide('8', '3')", want: `2.6666666666666665`},
	{query: "divide('128M', '256M')", want: `0.5`},
	{query: "divide('12Ki', `3`)", want: `"4Ki"`},
	{query: "divide('12Ki', '2Ki')", want: `6`},
	{query: "divide('12Ki', '200')", want: `61.44`},
	{query: "divide('12Ki', '2s')", wantErr: "JMESPath function 'divide': Types mismatch"},
	{query: "divide('12s', `3`)", want: `"4s"`},
	{query: "divide('12s', '5s')", want: `2.4`},
	{query: "divide('12s', '4Ki')", wantErr: "JMESPath function 'divide': Types mismatch"},
	{query: "divide(`14`, `3`)", want: `4.666666666666667`},
	{query: "divide(`14`, '5s')", wantErr: "JMESPath function 'divide': Types mismatch"},
	{query: "divide(`14`, '5Ki')", wantErr: "JMESPath function 'divide': Types mismatch"},
	{query: "divide(`14`, `0`)", wantErr: "JMESPath function 'divide': Zero divisor passed"},
	{query: "divide('4Ki', `0`)", wantErr: "JMESPath function 'divide': Zero divisor passed"},
	{query: "divide('4Ki', '0Ki')", wantErr: "JMESPath function 'divide': Zero divisor passed"},
	{query: "divide('4', '0')", wantErr: "JMESPath function 'divide': Zero divisor passed"},
	{query: "divide('4s', `0`)", wantErr: "JMESPath function 'divide': Zero divisor passed"},
	{query: "divide('4s', '0s')", wantErr: "JMESPath function 'divide': Zero divisor passed"},
	{query: "divide('1Gi', `3`)", want: `"357913941"`},
	{query: "divide('10', `4`)", want: `"2"`},
	{query: "divide('1.5', `0.7`)", want: `"2100m"`},
	{query: "divide('100m', `3`)", want: `"33m"`},
	{query: "divide('1h', `7`)", want: `"8m34.285714285s"`},
	{query: "divide('1Gi', `2.5`)", want: `"429496729600m"`},
	{query: "divide('1', `1e-7`)", want: `"10M"`},
	{query: "modulo(`12`, `13`)", want: `12`},
	{query: "modulo(`13`, `12`)", want: `1`},
	{query: "modulo(`-7`, `3`)", want: `-1`},
	{query: "modulo(`7`, `-3`)", want: `1`},
	{query: "modulo(`7.5`, `2`)", wantErr: "JMESPath function 'modulo': Non-integer argument(s) passed for modulo"},
	{query: "modulo(`7`, `2.5`)", wantErr: "JMESPath function 'modulo': Non-integer argument(s) passed for modulo"},
	{query: "modulo(`7`, `0`)", wantErr: "JMESPath function 'modulo': Zero divisor passed"},
	{query: "modulo(`0.5`, `0`)", wantErr: "JMESPath function 'modulo': Non-integer argument(s) passed for modulo"},
	{query: "modulo('12Ki', '5Ki')", want: `"2Ki"`},
	{query: "modulo('13', '12')", want: `"1"`},
	{query: "modulo('1Gi', '300Mi')", want: `"124Mi"`},
	{query: "modulo('1.5', '1')", wantErr: "JMESPath function 'modulo': Non-integer argument(s) passed for modulo"},
	{query: "modulo('10', '0')", wantErr: "JMESPath function 'modulo': Zero divisor passed"},
	{query: "modulo('10', '0.5')", wantErr: "JMESPath function 'modulo': Non-integer argument(s) passed for modulo"},
	{query: "modulo('500m', '1')", wantErr: "JMESPath function 'modulo': Non-integer argument(s) passed for modulo"},
	{query: "modulo('12Ki', `5`)", wantErr: "JMESPath function 'modulo': Types mismatch"},
	{query: "modulo('13s', '12s')", want: `"1s"`},
	{query: "modulo('1h', '7m')", wantErr: "JMESPath function 'modulo': Types mismatch"},
	{query: "modulo('1h', '0s')", wantErr: "JMESPath function 'modulo': Zero divisor passed"},
	{query: "modulo('13s', `2`)", wantErr: "JMESPath function 'modulo': Types mismatch"},
	{query: "modulo(`13`, '2s')", wantErr: "JMESPath function 'modulo': Types mismatch"},
	{query: "modulo(`1e20`, `3`)", wantErr: "JMESPath function 'modulo': Non-integer argument(s) passed for modulo"},
	// sum adds pairwise from the first element; one element answers itself.
	{query: "sum(`[]`)", wantErr: "JMESPath function 'sum': at least one element in the array is required"},
	{query: "sum(`[12]`)", want: `12`},
	{query: "sum(`[12, 13, 1, 4]`)", want: `30`},
	{query: "sum(`[\"12\", \"13s\"]`)", wantErr: "JMESPath function 'sum': Types mismatch"},
	{query: "sum(`[12, \"13Ki\"]`)", wantErr: "JMESPath function 'sum': Types mismatch"},
	{query: "sum(`[\"12Ki\"]`)", want: `"12Ki"`},
	{query: "sum(`[\"12Ki\", \"13Ki\", \"1Ki\", \"4Ki\"]`)", want: `"30Ki"`},
	{query: "sum(`[\"12Ki\", \"13\"]`)", want: `"12301"`},
	{query: "sum(`[\"12s\", \"13s\", \"1s\", \"4s\"]`)", want: `"30s"`},
	{query: "sum(`[\"12s\", 13]`)", wantErr: "JMESPath function 'sum': Types mismatch"},
	{query: "sum(`[\"abc\"]`)", want: `"abc"`},
	{query: "sum(`[true]`)", want: `true`},
	{query: "sum(`[null, 1]`)", wantErr: "JMESPath function 'sum': invalid operand"},
	{query: "sum(`[\"abc\", 1]`)", wantErr: "JMESPath function 'sum': invalid operand"},
	{query: "sum(`[\"1m\", \"1m\", \"1\"]`)", want: `"1002m"`},
	{query: "sum(`[\"100m\", \"200m\", \"700m\"]`)", want: `"1"`},
	{query: "sum(`[\"1Gi\", \"512Mi\", \"0.5Gi\"]`)", want: `"2Gi"`},
	{query: "sum(`[\"1h\", \"30m\", \"45s\"]`)", wantErr: "JMESPath function 'sum': Types mismatch"},
	{query: "sum(`[1.5, 2.25]`)", want: `3.75`},
	{query: "sum(items(`{\"a\": 1}`, 'k', 'v'))", wantErr: "JMESPath function 'sum': Types mismatch"},
	{query: "lookup(items(`{\"a\": 1}`, 'k', 'v'), `0`)", wantErr: "JMESPath function 'lookup': argument #1 is not of type Object or Array"},
	{query: "sum(`\"abc\"`)", wantErr: "Invalid type for: abc, expected: []jmespath.JpType{\"array\"}"},
	{query: "sum(`{\"a\": 1}`)", wantErr: "Invalid type for: map[a:1], expected: []jmespath.JpType{\"array\"}"},
	{query: "sum(`[\"1h\", \"30m0s\", \"45s\"]`)", want: `"1h30m45s"`},
	// pattern_match: "*" any run, "?" one rune; Kyverno names its errors regex_match.
	{query: "pattern_match('prefix-*', 'prefix-foo')", want: `true`},
	{query: "pattern_match('prefix-*', 'foo-prefix')", want: `false`},
	{query: "pattern_match('12*', `123`)", want: `true`},
	{query: "pattern_match('1?3', `123`)", want: `true`},
	{query: "pattern_match('1.5', `1.5`)", want: `true`},
	{query: "pattern_match('', '')", want: `true`},
	{query: "pattern_match('', 'a')", want: `false`},
	{query: "pattern_match('*', '')", want: `true`},
	{query: "pattern_match('?', '')", want: `false`},
	{query: "pattern_match('a*b*c', 'aXbYc')", want: `true`},
	{query: "pattern_match('a*b*c', 'aXbYcd')", want: `false`},
	{query: "pattern_match('*.example.com', 'x.y.example.com')", want: `true`},
	{query: "pattern_match('h?llo', 'héllo')", want: `true`},
	{query: "pattern_match('[a]', '[a]')", want: `true`},
	{query: "pattern_match('a**?', 'ab')", want: `true`},
	{query: "pattern_match('a', `true`)", wantErr: "Invalid type for: true, expected: []jmespath.JpType{\"string\", \"number\"}"},
	{query: "pattern_match(`1`, 'a')", wantErr: "Invalid type for: 1, expected: []jmespath.JpType{\"string\"}"},
	// random is not deterministic: its shape is checked by regex_match.
	{query: "random('')", wantErr: "no pattern provided"},
	{query: "random('(')", wantErr: "error parsing regexp: missing closing ): `(`"},
	{query: "random('[')", wantErr: "error parsing regexp: missing closing ]: `[`"},
	{query: "regex_match('^[a-z]{8}$', random('[a-z]{8}'))", want: `true`},
	{query: "regex_match('^[0-9a-f]{4}-[0-9a-f]{4}$', random('[0-9a-f]{4}-[0-9a-f]{4}'))", want: `true`},
	{query: "length(random('abc'))", want: `3`},
	{query: "random('abc')", want: `"abc"`},
	{query: "regex_match('^(foo|bar)x*$', random('(foo|bar)x*'))", want: `true`},
	{query: "regex_match('^\\d{3}$', random('\\d{3}'))", wantErr: "error parsing regexp: invalid escape sequence: `\\d`"},
	{query: "random(`1`)", wantErr: "Invalid type for: 1, expected: []jmespath.JpType{\"string\"}"},
	// image_normalize: docker.io by default, no library/, latest unless a digest.
	{query: "image_normalize('nginx')", want: `"docker.io/nginx:latest"`},
	{query: "image_normalize('docker.io/nginx')", want: `"docker.io/nginx:latest"`},
	{query: "image_normalize('docker.io/library/nginx')", want: `"docker.io/library/nginx:latest"`},
	{query: "image_normalize('ghcr.io/library/nginx')", want: `"ghcr.io/library/nginx:latest"`},
	{query: "image_normalize('ghcr.io/nginx')", want: `"ghcr.io/nginx:latest"`},
	{query: "image_normalize('ghcr.io/nginx:latest')", want: `"ghcr.io/nginx:latest"`},
	{query: "image_normalize('ghcr.io/nginx:1.2')", want: `"ghcr.io/nginx:1.2"`},
	{query: "image_normalize('')", wantErr: "JMESPath function 'image_normalize': bad image: docker.io/, defaultRegistry: docker.io, enableDefaultRegistryMutation: true: invalid reference format"},
	{query: "image_normalize('nginx:1.25')", want: `"docker.io/nginx:1.25"`},
	{query: "image_normalize('library/nginx')", want: `"docker.io/library/nginx:latest"`},
	{query: "image_normalize('localhost/app')", want: `"localhost/app:latest"`},
	{query: "image_normalize('localhost:5000/app:v1')", want: `"localhost:5000/app:v1"`},
	{query: "image_normalize('Registry/app')", want: `"Registry/app:latest"`},
	{query: "image_normalize('Nginx')", wantErr: "JMESPath function 'image_normalize': bad image: docker.io/Nginx, defaultRegistry: docker.io, enableDefaultRegistryMutation: true: repository name must be lowercase"},
	{query: "image_normalize('nginx@sha256:2c93b4a7a5a6a7a1f2c5a5e6f4c7d8e9f0a1b2c3d4e5f60718293a4b5c6d7e8f')", want: `"docker.io/nginx@sha256:2c93b4a7a5a6a7a1f2c5a5e6f4c7d8e9f0a1b2c3d4e5f60718293a4b5c6d7e8f"`},
	{query: "image_normalize('nginx:1.25@sha256:2c93b4a7a5a6a7a1f2c5a5e6f4c7d8e9f0a1b2c3d4e5f60718293a4b5c6d7e8f')", want: `"docker.io/nginx@sha256:2c93b4a7a5a6a7a1f2c5a5e6f4c7d8e9f0a1b2c3d4e5f60718293a4b5c6d7e8f"`},
	{query: "image_normalize('nginx@sha256:abc')", wantErr: "JMESPath function 'image_normalize': bad image: docker.io/nginx@sha256:abc, defaultRegistry: docker.io, enableDefaultRegistryMutation: true: invalid reference format"},
	{query: "image_normalize('my_registry/app')", want: `"docker.io/my_registry/app:latest"`},
	{query: "image_normalize('gcr.io/a/b/c:tag')", want: `"gcr.io/a/b/c:tag"`},
	{query: "image_normalize('nginx:')", wantErr: "JMESPath function 'image_normalize': bad image: docker.io/nginx:, defaultRegistry: docker.io, enableDefaultRegistryMutation: true: invalid reference format"},
	{query: "image_normalize(':tag')", wantErr: "JMESPath function 'image_normalize': bad image: docker.io/:tag, defaultRegistry: docker.io, enableDefaultRegistryMutation: true: invalid reference format"},
	{query: "image_normalize('@sha256:2c93b4a7a5a6a7a1f2c5a5e6f4c7d8e9f0a1b2c3d4e5f60718293a4b5c6d7e8f')", wantErr: "JMESPath function 'image_normalize': bad image: docker.io/@sha256:2c93b4a7a5a6a7a1f2c5a5e6f4c7d8e9f0a1b2c3d4e5f60718293a4b5c6d7e8f, defaultRegistry: docker.io, enableDefaultRegistryMutation: true: invalid reference format"},
	{query: "image_normalize('a/b/c')", want: `"docker.io/a/b/c:latest"`},
	{query: "image_normalize('[::1]:5000/app')", want: `"[::1]:5000/app:latest"`},
	// is_external_url on IP literals; a host name is resolved (TestIsExternalURLResolves).
	{query: "is_external_url('http://127.0.0.1')", want: `false`},
	{query: "is_external_url('http://172.16.1.1')", want: `false`},
	{query: "is_external_url('http://10.1.1.1')", want: `false`},
	{query: "is_external_url('http://192.168.0.1')", want: `false`},
	{query: "is_external_url('http://8.8.8.8')", want: `true`},
	{query: "is_external_url('http://245.48.83.160')", want: `true`},
	{query: "is_external_url('http://[fd12:3456:789a:1::1]')", want: `false`},
	{query: "is_external_url('http://[::1]')", want: `false`},
	{query: "is_external_url('http://[2001:db8::ff00:42:8329]')", want: `true`},
	{query: "is_external_url('http://www.google.com@192.168.1.3')", want: `false`},
	{query: "is_external_url('http://169.254.169.254/latest')", want: `true`},
	{query: "is_external_url('https://8.8.8.8:443/x?y=z')", want: `true`},
	{query: "is_external_url('8.8.8.8')", wantErr: "lookup : no such host"},
	{query: "is_external_url('http://[::1')", wantErr: "parse \"http://[::1\": missing ']' in host"},
	{query: "is_external_url(':bad')", wantErr: "parse \":bad\": missing protocol scheme"},
	{query: "is_external_url('')", wantErr: "lookup : no such host"},
	{query: "is_external_url('/path/only')", wantErr: "lookup : no such host"},
	{query: "is_external_url(`1`)", wantErr: "Invalid type for: 1, expected: []jmespath.JpType{\"string\"}"},
	// time_add's own errors.
	{query: "time_add('2021-01-02T15:04:05Z', 'x')", wantErr: "time: invalid duration \"x\""},
	{query: "time_add('bad', '1h')", wantErr: "parsing time \"bad\" as \"2006-01-02T15:04:05Z07:00\": cannot parse \"bad\" as \"2006\""},
	{query: "time_add('2021-01-02T15:04:05Z', '-90m')", want: `"2021-01-02T13:34:05Z"`},
	{query: "no_such_fn('a')", wantErr: "unknown function"},
}

// TestIsExternalURLResolves checks is_external_url on host names, which Kyverno
// resolves: external only when no address is loopback or private, an error when the
// name does not resolve. The resolver is a fake (no test reaches a DNS server).
func TestIsExternalURLResolves(t *testing.T) {
	hosts := map[string][]string{
		"public.example":  {"93.184.216.34", "2606:2800:220:1::1"},
		"mixed.example":   {"93.184.216.34", "10.0.0.7"},
		"loopback.test":   {"127.0.0.1"},
		"ula.example":     {"fd00::1"},
		"linklocal.test":  {"169.254.169.254"},
		"unspecified.one": {"0.0.0.0"},
	}
	lookup := func(_ context.Context, host string) ([]net.IPAddr, error) {
		addrs, ok := hosts[host]
		if !ok {
			return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
		}
		var out []net.IPAddr
		for _, a := range addrs {
			out = append(out, net.IPAddr{IP: net.ParseIP(a)})
		}
		return out, nil
	}
	fc := newKyvernoFunctionCaller(lookup)
	for _, tt := range []struct{ url, want, wantErr string }{
		{url: "https://public.example/path", want: "true"},
		{url: "http://mixed.example:8080", want: "false"},
		{url: "http://loopback.test", want: "false"},
		{url: "http://ula.example", want: "false"},
		{url: "http://linklocal.test", want: "true"},
		{url: "http://unspecified.one", want: "true"},
		{url: "http://user:pw@public.example", want: "true"},
		{url: "http://nowhere.example", wantErr: "lookup nowhere.example: no such host"},
		{url: "http://10.1.2.3", want: "false"}, // an address is not resolved
	} {
		t.Run(tt.url, func(t *testing.T) {
			q, err := jmespath.Compile("is_external_url(@)")
			if err != nil {
				t.Fatal(err)
			}
			got, err := q.Search(tt.url, jmespath.WithFunctionCaller(fc))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if g, w := asJSON(t, got), jsonValue(t, tt.want); g != w {
				t.Fatalf("got %v, want %s", g, tt.want)
			}
		})
	}
}

// TestJMESPathFunctionErrorsName checks that the handler registered under a name,
// given an argument of the wrong kind, names that function in its error (the fork
// checks kinds first, so only a direct call reaches these errors). time_add's named
// itself time_to_cron.
func TestJMESPathFunctionErrorsName(t *testing.T) {
	handlers := map[string]jmespath.JpFunction{}
	for _, f := range kyvernoFunctions(nil) {
		if _, dup := handlers[f.Name]; dup {
			t.Fatalf("%s is registered twice", f.Name)
		}
		handlers[f.Name] = f.Handler
	}
	for _, tt := range []struct {
		name string
		args []any
		want string // the name in the error: Kyverno's, which is not always the function's
	}{
		{"time_add", []any{1.0, "1h"}, "time_add"},
		{"time_add", []any{"2021-01-02T15:04:05Z", 1.0}, "time_add"},
		{"time_truncate", []any{1.0, "1h"}, "time_truncate"},
		{"time_to_cron", []any{1.0}, "time_to_cron"},
		{"time_utc", []any{1.0}, "time_utc"},
		{"time_diff", []any{"2021-01-02T15:04:05Z", 1.0}, "time_diff"},
		{"time_parse", []any{1.0, "x"}, "time_parse"},
		{"time_since", []any{"", 1.0, ""}, "time_since"},
		{"add", []any{true, 1.0}, "add"},
		{"subtract", []any{1.0, nil}, "subtract"},
		{"multiply", []any{"x", 1.0}, "multiply"},
		{"divide", []any{1.0, []any{}}, "divide"},
		{"modulo", []any{map[string]any{}, 1.0}, "modulo"},
		{"sum", []any{"not an array"}, "sum"},
		{"random", []any{1.0}, "random"},
		{"x509_decode", []any{1.0}, "x509_decode"},
		{"image_normalize", []any{1.0}, "image_normalize"},
		{"pattern_match", []any{1.0, "a"}, "regex_match"},
		{"pattern_match", []any{"a", []any{}}, "regex_match"},
		{"is_external_url", []any{1.0}, "path_canonicalize"},
	} {
		h, ok := handlers[tt.name]
		if !ok {
			t.Fatalf("%s is not registered", tt.name)
		}
		_, err := h(tt.args)
		if want := "JMESPath function '" + tt.want + "'"; err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s%v: error %v, want one naming %q", tt.name, tt.args, err, want)
		}
	}
}

// wildcardReference is go-wildcard v1's Match written as its definition: "*" any run
// of runes, "?" one rune, any other rune itself, over the whole name.
func wildcardReference(p, s []rune) bool {
	if len(p) == 0 {
		return len(s) == 0
	}
	switch p[0] {
	case '*':
		return wildcardReference(p[1:], s) || (len(s) > 0 && wildcardReference(p, s[1:]))
	case '?':
		return len(s) > 0 && wildcardReference(p[1:], s[1:])
	}
	return len(s) > 0 && s[0] == p[0] && wildcardReference(p[1:], s[1:])
}

func TestWildcardMatch(t *testing.T) {
	for _, tt := range []struct {
		pattern, name string
		want          bool
	}{
		{"", "", true}, {"", "a", false}, {"*", "", true}, {"?", "", false},
		{"a*", "a", true}, {"*a", "ba", true}, {"*a", "ab", false},
		{"a*b*c", "abc", true}, {"a*b*c", "aXbYbZc", true}, {"a*b*c", "aXbYcd", false},
		{"a?c", "abc", true}, {"a?c", "ac", false}, {"h?llo", "héllo", true},
		{"**?", "x", true}, {"*?*?*", "x", false}, {"kube-*", "kube-system", true},
		{"[a]", "[a]", true}, {"a\\*", "a\\bc", true},
	} {
		if got := wildcardMatch(tt.pattern, tt.name); got != tt.want {
			t.Errorf("wildcardMatch(%q, %q) = %v, want %v", tt.pattern, tt.name, got, tt.want)
		}
		if ref := wildcardReference([]rune(tt.pattern), []rune(tt.name)); ref != tt.want {
			t.Errorf("reference(%q, %q) = %v, want %v", tt.pattern, tt.name, ref, tt.want)
		}
	}
}

// FuzzWildcardMatch compares wildcardMatch with its definition.
func FuzzWildcardMatch(f *testing.F) {
	for _, s := range [][2]string{{"a*b?c", "aXXbYc"}, {"*?*", "ab"}, {"", ""}, {"?é*", "éé"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, pattern, name string) {
		if len(pattern) > 12 || len(name) > 24 { // the definition is exponential
			return
		}
		if got, want := wildcardMatch(pattern, name), wildcardReference([]rune(pattern), []rune(name)); got != want {
			t.Fatalf("wildcardMatch(%q, %q) = %v, definition %v", pattern, name, got, want)
		}
	})
}
