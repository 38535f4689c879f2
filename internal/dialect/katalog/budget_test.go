package katalog

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// The hostile templates of issue 11: each used to hang past any deadline or exhaust
// memory; each must now fail with a budget error.
func TestBudgetStopsHostileTemplates(t *testing.T) {
	obj := map[string]any{"spec": map[string]any{"replicas": int64(1) << 60, "s": "abcdefgh"}}
	// resource is the budget exceeded first, "" when either may be.
	tests := []struct{ name, tmpl, resource string }{
		{"range over a huge field", `{{ range $i := .spec.replicas }}x{{ end }}`, "steps"},
		{"range over a huge literal", `{{ range 100000000000 }}{{ end }}`, "steps"},
		{"range with output", `{{ range 100000000000 }}xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx{{ end }}`, "bytes"},
		{"doubling a string", `{{ $s := .spec.s }}{{ range 200 }}{{ $s = printf "%s%s" $s $s }}{{ end }}{{ len $s }}`, ""},
		{"doubling with print", `{{ $s := .spec.s }}{{ range 200 }}{{ $s = print $s $s }}{{ end }}{{ len $s }}`, ""},
		{"doubling with replace", `{{ $s := .spec.s }}{{ range 200 }}{{ $s = replace "a" $s $s }}{{ end }}{{ len $s }}`, ""},
		{"doubling a list", `{{ $l := list 1 }}{{ range 200 }}{{ $l = list $l $l }}{{ end }}{{ toJson $l }}`, "bytes"},
		{"appending in a loop", `{{ $l := list }}{{ range 100000000 }}{{ $l = append $l "xxxxxxxx" }}{{ end }}{{ len $l }}`, ""},
		{"range around repeat", `{{ range 100000000 }}{{ repeat 65536 "x" }}{{ end }}`, "bytes"},
		{"joining shared strings", `{{ $s := repeat 65536 "x" }}{{ $l := list }}{{ range 1000 }}{{ $l = append $l $s }}{{ end }}{{ len (join "" $l) }}`, "bytes"},
		{"printf repeating one argument", `{{ $s := repeat 65536 "x" }}{{ printf "%[1]s%[1]s%[1]s%[1]s%[1]s%[1]s%[1]s%[1]s" $s | printf "%[1]s%[1]s%[1]s%[1]s%[1]s%[1]s%[1]s%[1]s" | printf "%[1]s%[1]s%[1]s%[1]s%[1]s%[1]s%[1]s%[1]s" | len }}`, "bytes"},
		{"recursive template", `{{ define "a" }}{{ lower "x" }}{{ template "a" . }}{{ template "a" . }}{{ end }}{{ template "a" . }}`, "steps"},
		{"nested ranges", `{{ range 100000 }}{{ range 100000 }}{{ end }}{{ end }}`, "steps"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, err := compileValue("x", tt.tmpl, Funcs())
			if err != nil {
				t.Fatal(err)
			}
			_, err = v.Eval(context.Background(), obj, Budget{})
			var be *BudgetError
			if !errors.As(err, &be) {
				t.Fatalf("got %v, want a budget error", err)
			}
			if tt.resource != "" && be.Resource != tt.resource {
				t.Errorf("exceeded %s, want %s: %v", be.Resource, tt.resource, err)
			}
			if !strings.Contains(err.Error(), "budget of") {
				t.Errorf("message %q does not name the budget", err)
			}
		})
	}
}

func TestBudgetIsAValue(t *testing.T) {
	v, err := compileValue("x", `{{ range 100 }}x{{ end }}`, Funcs())
	if err != nil {
		t.Fatal(err)
	}
	if got, err := v.Eval(context.Background(), nil, Budget{Bytes: 100}); err != nil || got != strings.Repeat("x", 100) {
		t.Fatalf("within the budget: got %v, %v", got, err)
	}
	_, err = v.Eval(context.Background(), nil, Budget{Bytes: 99})
	var be *BudgetError
	if !errors.As(err, &be) || be.Resource != "bytes" || be.Limit != 99 {
		t.Fatalf("one byte over: got %v", err)
	}
	_, err = v.Eval(context.Background(), nil, Budget{Steps: 50})
	if !errors.As(err, &be) || be.Resource != "steps" || be.Limit != 50 {
		t.Fatalf("steps: got %v", err)
	}
}

func TestBudgetContextCancels(t *testing.T) {
	v, err := compileValue("x", `{{ range 100000000000 }}{{ end }}`, Funcs())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = v.Eval(ctx, nil, Budget{Steps: 1 << 62})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want the context's error", err)
	}
}

// The range rewrite keeps text/template's semantics.
func TestBudgetRangeSemantics(t *testing.T) {
	obj := map[string]any{
		"list": []any{"a", "b", nil},
		"map":  map[string]any{"z": int64(1), "a": int64(2)},
		"n":    int64(3),
		"none": []any{},
	}
	tests := []struct{ tmpl, want string }{
		{`{{ range .list }}[{{ . }}]{{ end }}`, "[a][b][]"},
		{`{{ range $e := .list }}{{ $e }},{{ end }}`, "a,b,,"},
		{`{{ range $i, $e := .list }}{{ $i }}={{ $e }},{{ end }}`, "0=a,1=b,2=,"},
		{`{{ range .map }}{{ . }},{{ end }}`, "2,1,"},
		{`{{ range $k, $v := .map }}{{ $k }}={{ $v }},{{ end }}`, "a=2,z=1,"},
		{`{{ range $i := .n }}{{ $i }}{{ end }}`, "012"},
		{`{{ range 3 }}{{ . }}{{ end }}`, "012"},
		{`{{ range .none }}x{{ else }}empty{{ end }}`, "empty"},
		{`{{ range 0 }}x{{ else }}empty{{ end }}`, "empty"},
		{`{{ range .list }}{{ if eq . "b" }}{{ break }}{{ end }}{{ . }}{{ end }}`, "a"},
		{`{{ range .list }}{{ if eq . "a" }}{{ continue }}{{ end }}{{ . }}{{ end }}`, "b"},
		{`{{ $n := 0 }}{{ range $i, $e := .list }}{{ $n = $i }}{{ end }}{{ $n }}`, "2"},
		{`{{ define "t" }}<{{ . }}>{{ end }}{{ template "t" "x" }}{{ template "t" }}`, "<x><>"},
	}
	for _, tt := range tests {
		v, err := compileValue("x", tt.tmpl, Funcs())
		if err != nil {
			t.Fatalf("%s: %v", tt.tmpl, err)
		}
		got, err := v.Eval(context.Background(), obj, Budget{})
		if err != nil {
			t.Errorf("%s: %v", tt.tmpl, err)
			continue
		}
		if got != tt.want {
			t.Errorf("%s = %q, want %q", tt.tmpl, got, tt.want)
		}
	}
	v, _ := compileValue("x", `{{ range $i, $e := 3 }}{{ end }}`, Funcs())
	if _, err := v.Eval(context.Background(), obj, Budget{}); err == nil || !strings.Contains(err.Error(), "more than one variable") {
		t.Errorf("two variables over an integer: got %v", err)
	}
}

// A rule over its budget fails its entry alone, with a message that names the rule and
// the budget; another Katalog's entry for the same kind still applies.
func TestBudgetFailsTheRuleAlone(t *testing.T) {
	b := mustCompile(t, entryHeader+`      operatorBox:
        mutation:
        - {field: spec.hostile, override: "{{ range .spec.replicas }}{{ end }}"}
---
apiVersion: orkestra.orkspace.io/v1
kind: Katalog
metadata:
  name: other
spec:
  crds:
    website:
      apiTypes: {group: demo.orkestra.io, version: v1alpha1, kind: Website, plural: websites}
      operatorBox:
        mutation:
        - {field: spec.image, default: "nginx"}
`)
	res := mutate(t, b, website(map[string]any{"replicas": int64(1) << 62}))
	if got, _ := res.Object["spec"].(map[string]any)["image"]; got != "nginx" {
		t.Errorf("the other entry did not apply: spec.image = %v", got)
	}
	if len(res.Failures) != 1 {
		t.Fatalf("failures = %v, want the hostile rule's", res.Failures)
	}
	msg := res.Failures[0].Err.Error()
	for _, want := range []string{`field "spec.hostile"`, "budget of 100000 steps"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q does not contain %q", msg, want)
		}
	}
}
