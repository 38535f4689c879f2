package katalog

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"text/template"
)

func TestValueEval(t *testing.T) {
	obj := map[string]any{
		"metadata": map[string]any{"name": "my-site", "namespace": "web", "labels": map[string]any{"app": "x"}},
		"spec": map[string]any{
			"version": "1.4", "replicas": int64(3), "enabled": false, "nothing": nil,
			"schedule": "0 2 * * 1-5", "list": []any{"a", "b"}, "empty": "",
		},
	}
	tests := []struct {
		in   any
		want any
	}{
		{"plain string", "plain string"},
		{int64(2), int64(2)},
		{true, true},
		{"{{ .metadata.name }}", "my-site"},
		{"{{ .metadata.namespace }}", "web"},
		{"{{ .spec.version }}", "1.4"},
		{"{{ .spec.replicas }}", int64(3)},
		{"{{ .spec.enabled }}", false},
		{"{{ .spec.list }}", []any{"a", "b"}},
		{"{{ $.spec.replicas }}", int64(3)},
		{"{{ .spec.missing }}", ""},
		{"{{ .spec.nothing }}", ""},
		{"{{ .spec.missing.deeper }}", ""},
		{"{{ .spec.version.deeper }}", ""},
		{`{{ .spec.missing | default "latest" }}`, "latest"},
		{`{{ .spec.empty | default "latest" }}`, "latest"},
		{`{{ .spec.version | default "latest" }}`, "1.4"},
		{`{{ .spec.enabled | default true }}`, "false"},
		{"[{{ .spec.missing }}]", "[]"},
		{`[{{ index .spec "missing" }}]`, "[]"},
		{`[{{ index .metadata.labels "nope" }}]`, "[]"},
		{`[{{ fromJson "null" }}]`, "[]"},
		{`{{ with .spec.missing }}yes{{ else }}no{{ end }}`, "no"},
		{`{{ range .spec.list }}<{{ . }}>{{ end }}`, "<a><b>"},
		{`{{ $v := .spec.version }}{{ $v }}`, "1.4"},
		{"{{ add .spec.replicas 1 }}", "4"},
		{"{{ add .spec.replicas 1 }}x", "4x"},
		{"{{ cronToMap .spec.schedule }}", map[string]any{"minute": "0", "hour": "2", "dayOfMonth": "*", "month": "*", "dayOfWeek": "1-5"}},
		{"{{ .spec.schedule | cronToMap }}", map[string]any{"minute": "0", "hour": "2", "dayOfMonth": "*", "month": "*", "dayOfWeek": "1-5"}},
		{"{{ (cronToMap .spec.schedule).hour }}", "2"},
		{"{{ cronToMap .spec.schedule }}!", `{"dayOfMonth":"*","dayOfWeek":"1-5","hour":"2","minute":"0","month":"*"}!`},
		{`{{ split "," "a,b" }}`, []any{"a", "b"}},
		{`{{- .spec.version -}}`, "1.4"},
		{`{{ printf "%s-%d" .metadata.name .spec.replicas }}`, "my-site-3"},
	}
	for _, tt := range tests {
		v, err := compileValue("test", tt.in, Funcs())
		if err != nil {
			t.Errorf("%v: %v", tt.in, err)
			continue
		}
		got, err := v.Eval(context.Background(), obj, Budget{})
		if err != nil {
			t.Errorf("%v: %v", tt.in, err)
			continue
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%v = %#v, want %#v", tt.in, got, tt.want)
		}
		if s, ok := got.(string); ok && strings.Contains(s, "<no value>") {
			t.Errorf("%v printed <no value>", tt.in)
		}
	}
}

// TestHermetic proves that functions reaching the environment, files, the clock or
// randomness do not exist: templates naming them fail to parse at load.
func TestHermetic(t *testing.T) {
	for _, fn := range []string{"env", "expandenv", "readFile", "file", "now", "date", "randAlpha", "randInt", "uuidv4", "getHostByName", "exec", "include", "lookup"} {
		if _, ok := Funcs()[fn]; ok {
			t.Errorf("%s is in the library", fn)
		}
		_, err := compileValue("x", "{{ "+fn+" \"HOME\" }}", Funcs())
		if err == nil || !strings.Contains(err.Error(), `function "`+fn+`" not defined`) {
			t.Errorf("%s: want a parse error, got %v", fn, err)
		}
	}
}

func TestFuncs(t *testing.T) {
	obj := map[string]any{"spec": map[string]any{"n": int64(7), "s": " Hello World ", "l": []any{"b", "a", "b"}, "m": map[string]any{"k": "v"}}}
	tests := []struct{ in, want string }{
		{`{{ upper "ab" }}{{ lower "CD" }}`, "ABcd"},
		{`{{ trim .spec.s }}`, "Hello World"},
		{`{{ replace "o" "0" .spec.s }}`, " Hell0 W0rld "},
		{`{{ contains "World" .spec.s }} {{ hasPrefix " He" .spec.s }} {{ hasSuffix "x" .spec.s }}`, "true true false"},
		{`{{ quote "a\"b" }} {{ squote "c" }}`, `"a\"b" 'c'`},
		{`{{ join "-" (split "," "a,b,c") }}`, "a-b-c"},
		{`{{ join "," (sortAlpha (uniq .spec.l)) }}`, "a,b"},
		{`{{ first .spec.l }}{{ last .spec.l }}{{ len (rest .spec.l) }}`, "bb2"},
		{`{{ has "a" .spec.l }}`, "true"},
		{`{{ add 1 2 3 }} {{ sub 10 .spec.n }} {{ mul 2 3 }} {{ div 7 2 }} {{ mod 7 4 }} {{ max 1 9 3 }} {{ min 4 2 }}`, "6 3 6 3 3 9 2"},
		{`{{ add 1.5 1 }} {{ div 7.0 2 }} {{ add "2" 3 }}`, "2.5 3.5 5"},
		{`{{ b64enc "hi" }} {{ b64dec "aGk=" }}`, "aGk= hi"},
		{`{{ toJson .spec.m }} {{ (fromJson "{\"a\":1}").a }}`, `{"k":"v"} 1`},
		{`{{ sha256sum "abc" }}`, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
		{`{{ printf "%03d" 7 }}`, "007"},
		{`{{ coalesce "" .spec.missing "x" }} {{ ternary "y" "n" true }} {{ empty "" }}`, "x y true"},
		{`{{ get .spec.m "k" }}{{ hasKey .spec.m "k" }} {{ join "," (keys .spec.m) }}`, "vtrue k"},
		{`{{ (dict "a" 1).a }} {{ len (list 1 2) }}`, "1 2"},
		{`{{ repeat 3 "ab" }} {{ substr 1 3 "hello" }} {{ trunc 2 "hello" }} {{ title "a b" }} {{ nospace "a b c" }}`, "ababab el he A B abc"},
		{`{{ cronFromMap (cronToMap "@hourly") }} {{ cronFromAny "*/5 * * * *" }} {{ cronFromAny (cronToMap "0 1 * * MON") }}`, "0 * * * * */5 * * * * 0 1 * * MON"},
		{`{{ int "12" }} {{ float 2 }} {{ atoi "7" }}`, "12 2 7"},
	}
	for _, tt := range tests {
		v, err := compileValue("f", tt.in, Funcs())
		if err != nil {
			t.Errorf("%s: %v", tt.in, err)
			continue
		}
		got, err := v.Eval(context.Background(), obj, Budget{})
		if err != nil {
			t.Errorf("%s: %v", tt.in, err)
			continue
		}
		if printed(got) != tt.want {
			t.Errorf("%s = %q, want %q", tt.in, printed(got), tt.want)
		}
	}
	for _, bad := range []string{`{{ div 1 0 }}`, `{{ mod 1 0 }}`, `{{ b64dec "%%%" }}`, `{{ fromJson "{" }}`, `{{ add "x" 1 }}`, `{{ repeat 100000000 "ab" }}`, `{{ cronToMap "61 * * * *" }}`, `{{ cronToMap "@reboot" }}`, `{{ dict "a" }}`} {
		v, err := compileValue("f", bad, Funcs())
		if err != nil {
			t.Errorf("%s: parse: %v", bad, err)
			continue
		}
		if _, err := v.Eval(context.Background(), obj, Budget{}); err == nil {
			t.Errorf("%s: want an error", bad)
		}
	}
}

// FuzzIsPlain checks the fast-path detector: every string it calls plain is exactly
// what text/template would print for it.
func FuzzIsPlain(f *testing.F) {
	for _, s := range []string{"plain", "a{b}c", "{{ .x }}", "}}", "{ {", "{{", "x{{- .y -}}z", "{{/* c */}}"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !IsPlain(s) {
			if !strings.Contains(s, "{{") {
				t.Fatalf("%q is not plain but holds no action", s)
			}
			return
		}
		tmpl, err := template.New("x").Parse(s)
		if err != nil {
			t.Fatalf("plain %q does not parse: %v", s, err)
		}
		var b strings.Builder
		if err := tmpl.Execute(&b, nil); err != nil {
			t.Fatalf("plain %q does not execute: %v", s, err)
		}
		if b.String() != s {
			t.Fatalf("plain %q prints %q", s, b.String())
		}
		v, err := compileValue("x", s, Funcs())
		if err != nil || v.kind != constantValue {
			t.Fatalf("plain %q did not take the fast path: %v", s, err)
		}
	})
}
