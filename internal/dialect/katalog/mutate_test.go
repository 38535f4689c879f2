package katalog

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/morph-dev/morph/internal/engine"
	"github.com/morph-dev/morph/internal/objects"
	"github.com/morph-dev/morph/internal/policy"
)

// compileText compiles Katalog YAML.
func compileText(t testing.TB, text string, opts Options) (*policy.Bundle, error) {
	t.Helper()
	docs, err := policy.Decode("katalog.yaml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return New(opts).Compile(docs)
}

func mustCompile(t testing.TB, text string) *policy.Bundle {
	t.Helper()
	b, err := compileText(t, text, Options{})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

const entryHeader = `apiVersion: orkestra.orkspace.io/v1
kind: Katalog
metadata:
  name: demo
spec:
  crds:
    website:
      apiTypes: {group: demo.orkestra.io, version: v1alpha1, kind: Website, plural: websites}
`

func website(spec map[string]any) map[string]any {
	return map[string]any{"apiVersion": "demo.orkestra.io/v1alpha1", "kind": "Website", "metadata": map[string]any{"name": "my-site"}, "spec": spec}
}

func mutate(t *testing.T, b *policy.Bundle, obj map[string]any) *engine.Result {
	t.Helper()
	set, err := engine.NewSet(b.Mutators)
	if err != nil {
		t.Fatal(err)
	}
	res, err := set.Mutate(context.Background(), requestFor(obj, engine.Create))
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestDefaultEmptiness: a default applies to absent, null, "", {} and [], not to 0 or
// false.
func TestDefaultEmptiness(t *testing.T) {
	b := mustCompile(t, entryHeader+`      operatorBox:
        mutation:
        - {field: spec.x, default: "d"}
`)
	tests := []struct {
		name    string
		spec    map[string]any
		applies bool
	}{
		{"absent", map[string]any{}, true},
		{"null", map[string]any{"x": nil}, true},
		{"empty string", map[string]any{"x": ""}, true},
		{"empty map", map[string]any{"x": map[string]any{}}, true},
		{"empty list", map[string]any{"x": []any{}}, true},
		{"zero", map[string]any{"x": int64(0)}, false},
		{"false", map[string]any{"x": false}, false},
		{"value", map[string]any{"x": "v"}, false},
	}
	for _, tt := range tests {
		res := mutate(t, b, website(tt.spec))
		got, _ := Path{"spec", "x"}.Get(res.Object)
		if applied := got == "d"; applied != tt.applies {
			t.Errorf("%s: applied=%t, want %t (patch %v)", tt.name, applied, tt.applies, res.Patch)
		}
	}
}

// TestRulesInOrder: each rule sees the previous result; override wins over default;
// a rule that would write the same value changes nothing.
func TestRulesInOrder(t *testing.T) {
	b := mustCompile(t, entryHeader+`      operatorBox:
        mutation:
        - {field: spec.a, default: "one"}
        - {field: spec.b, override: "{{ .spec.a }}-two"}
        - {field: spec.c, default: "ignored", override: "{{ .spec.b }}-three"}
        - {field: spec.same, override: "kept"}
`)
	res := mutate(t, b, website(map[string]any{"same": "kept"}))
	spec := res.Object["spec"].(map[string]any)
	if spec["a"] != "one" || spec["b"] != "one-two" || spec["c"] != "one-two-three" {
		t.Errorf("spec = %v", spec)
	}
	if len(res.Trace) != 1 || slices.Contains(res.Trace[0].Paths, "/spec/same") {
		t.Errorf("trace = %+v", res.Trace)
	}
	same := mutate(t, b, res.Object)
	if len(same.Patch) != 0 || len(same.Trace) != 0 {
		t.Errorf("second application changed %v", same.Patch)
	}
}

// TestMutationErrorNeverBlocks: a failing rule drops the entry's changes, the request
// goes on, and the warning and log line follow spec 000's error reference.
func TestMutationErrorNeverBlocks(t *testing.T) {
	b := mustCompile(t, entryHeader+`      operatorBox:
        mutation:
        - {field: spec.replicas, default: "2"}
        - field: spec.image
          override: "{{ b64dec .spec.badField }}"
`)
	obj := website(map[string]any{"badField": "%%%"})
	res := mutate(t, b, obj)
	if len(res.Patch) != 0 || len(res.Failures) != 1 {
		t.Fatalf("patch %v, failures %v", res.Patch, res.Failures)
	}
	want := `mutation rule override for field "spec.image": resolving template "{{ b64dec .spec.badField }}": `
	if err := res.Failures[0].Err; !strings.HasPrefix(err.Error(), want) {
		t.Errorf("error %q, want prefix %q", err, want)
	}
	if !strings.HasPrefix(res.Warnings[0], "Katalog/demo[website] skipped: "+want) {
		t.Errorf("warning %q", res.Warnings[0])
	}
	line := AdmissionErrorLog("Website", "my-site", errors.New(`mutation rule override for field "spec.image": resolving template "{{ .spec.badField }}": boom`))
	wantLine := `admission/mutate: error applying rules — allowing without mutation kind=Website name=my-site err="mutation rule override for field \"spec.image\": resolving template \"{{ .spec.badField }}\": boom"`
	if line != wantLine {
		t.Errorf("log line\n%s\nwant\n%s", line, wantLine)
	}
}

func TestSetThroughNonObject(t *testing.T) {
	b := mustCompile(t, entryHeader+`      operatorBox:
        mutation:
        - {field: spec.tls.enabled, default: "true"}
`)
	res := mutate(t, b, website(map[string]any{"tls": "yes"}))
	if len(res.Failures) != 1 || !strings.Contains(res.Failures[0].Err.Error(), "spec.tls is a string, not an object") {
		t.Fatalf("failures %v", res.Failures)
	}
	created := mutate(t, b, map[string]any{"apiVersion": "demo.orkestra.io/v1alpha1", "kind": "Website", "metadata": map[string]any{"name": "x"}})
	if p, _ := created.Patch.JSON(); string(p) != `[{"op":"add","path":"/spec","value":{"tls":{"enabled":"true"}}}]` {
		t.Errorf("patch %s", p)
	}
}

func TestSchemaConversion(t *testing.T) {
	store := objects.NewStore()
	crd := map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": "websites.demo.orkestra.io"},
		"spec": map[string]any{
			"group": "demo.orkestra.io", "names": map[string]any{"kind": "Website", "plural": "websites"},
			"versions": []any{map[string]any{"name": "v1alpha1", "schema": map[string]any{"openAPIV3Schema": map[string]any{
				"type": "object", "properties": map[string]any{"spec": map[string]any{"type": "object", "properties": map[string]any{
					"replicas": map[string]any{"type": "integer"}, "ratio": map[string]any{"type": "number"},
					"on": map[string]any{"type": "boolean"}, "port": map[string]any{"x-kubernetes-int-or-string": true},
					"env": map[string]any{"type": "object", "additionalProperties": map[string]any{"type": "integer"}},
				}}},
			}}}},
		},
	}
	if err := store.Add(crd); err != nil {
		t.Fatal(err)
	}
	b, err := compileText(t, entryHeader+`      operatorBox:
        mutation:
        - {field: spec.replicas, default: "{{ add 1 1 }}"}
        - {field: spec.ratio, default: "0.5"}
        - {field: spec.on, default: "true"}
        - {field: spec.port, default: "8080"}
        - {field: spec.env.level, default: "3"}
        - {field: spec.other, default: "4"}
`, Options{Objects: store})
	if err != nil {
		t.Fatal(err)
	}
	res := mutate(t, b, website(map[string]any{}))
	want := map[string]any{"replicas": int64(2), "ratio": 0.5, "on": true, "port": "8080", "env": map[string]any{"level": int64(3)}, "other": "4"}
	if !engine.Equal(res.Object["spec"], want) {
		t.Errorf("spec = %#v", res.Object["spec"])
	}
	bad, err := compileText(t, entryHeader+`      operatorBox:
        mutation:
        - {field: spec.replicas, override: "many"}
`, Options{Objects: store})
	if err != nil {
		t.Fatal(err)
	}
	res = mutate(t, bad, website(map[string]any{}))
	if len(res.Failures) != 1 || !strings.Contains(res.Failures[0].Err.Error(), `"many" is not an integer`) {
		t.Errorf("failures %v", res.Failures)
	}
}

func TestNoOpRuleWarning(t *testing.T) {
	b := mustCompile(t, entryHeader+`      operatorBox:
        mutation:
        - {field: spec.x}
        - {field: spec.y, default: "y"}
`)
	want := `katalog.yaml: document 1 (Katalog "demo"): spec.crds.website.operatorBox.mutation[0]: the rule for field "spec.x" declares neither default nor override: it does nothing`
	if len(b.Warnings) != 1 || b.Warnings[0] != want {
		t.Errorf("warnings %q", b.Warnings)
	}
	if len(b.Mutators) != 1 {
		t.Errorf("mutators %d", len(b.Mutators))
	}
}

func TestEntries(t *testing.T) {
	docs, err := policy.Decode("katalog.yaml", []byte(`apiVersion: orkestra.orkspace.io/v1
kind: Katalog
metadata:
  name: demo
  annotations: {morph.dev/order: "-5"}
spec:
  crds:
    website:
      apiTypes: {group: demo.orkestra.io, version: v1alpha1, kind: Website}
      webhooks: {operations: [CREATE]}
      operatorBox:
        mutateFirst: true
        mutation: [{field: spec.x, default: "1"}]
        validation: [{field: spec.x, required: true}]
    blog:
      apiTypes: {group: demo.orkestra.io, version: v1, kind: Blog, plural: blogs}
      webhooks: {mutation: false}
      operatorBox:
        mutation: {rules: [{field: spec.y, override: "2"}]}
`))
	if err != nil {
		t.Fatal(err)
	}
	es, b, err := New(Options{}).(*Dialect).CompileEntries(docs)
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 2 || es[0].Name != "blog" || es[1].Name != "website" {
		t.Fatalf("entries %v", es)
	}
	blog, site := es[0], es[1]
	if blog.Webhook.Mutation || !slices.Equal(blog.Webhook.Operations, []engine.Operation{engine.Create, engine.Update}) || blog.MutateFirst {
		t.Errorf("blog %+v", blog)
	}
	if !site.Webhook.Mutation || !site.Webhook.Validation || !slices.Equal(site.Webhook.Operations, []engine.Operation{engine.Create}) || !site.MutateFirst {
		t.Errorf("website %+v", site)
	}
	if site.APITypes.Plural != "websites" || site.ID().Order != -5 || site.EventReason() != "WebsiteMutation" {
		t.Errorf("website %+v %v", site.APITypes, site.ID())
	}
	m := b.Mutators[slices.IndexFunc(b.Mutators, func(m engine.Mutator) bool { return m.ID.Part == "website" })]
	if got := m.Targets; len(got) != 1 || got[0].Operations.Has(engine.Update) || !got[0].Operations.Has(engine.Create) || got[0].Kind != "Website" {
		t.Errorf("targets %+v", got)
	}
	if m.Reinvocation != engine.ReinvokeNever || m.FailurePolicy != engine.FailIgnore || !m.MutateFirst {
		t.Error("mutator policies")
	}
	if len(b.Validators) != 1 || !b.Validators[0].MutateFirst {
		t.Error("validator")
	}
}

func TestValidation(t *testing.T) {
	b := mustCompile(t, entryHeader+`      validation:
      - {field: spec.replicas, min: 1, max: "5"}
      - {field: spec.name, pattern: "^[a-z]+$", message: "name must be lower case", action: warn}
      - {field: spec.owner, required: true}
      - {field: spec.tags, max: 2}
      - {field: spec.title, min: 3}
`)
	v := b.Validators[0]
	tests := []struct {
		spec map[string]any
		want []string
	}{
		{map[string]any{"replicas": int64(3), "name": "abc", "owner": "me", "tags": []any{"a"}, "title": "long"}, nil},
		{map[string]any{"replicas": "2", "owner": "me", "title": "abc"}, nil},
		{map[string]any{"replicas": int64(0), "name": "ABC", "owner": "", "tags": []any{1, 2, 3}, "title": "ab"}, []string{
			"spec.replicas: spec.replicas must be at least 1 deny=true",
			"spec.name: name must be lower case deny=false",
			"spec.owner: spec.owner is required deny=true",
			"spec.tags: spec.tags must be at most 2 items deny=true",
			"spec.title: spec.title must be at least 3 characters deny=true",
		}},
		{map[string]any{"replicas": "9", "owner": "me", "title": true}, []string{
			"spec.replicas: spec.replicas must be at most 5 deny=true",
			"spec.title: spec.title is a boolean: min and max apply to numbers, strings and lists deny=true",
		}},
	}
	for i, tt := range tests {
		vs, err := v.Validate(context.Background(), nil, website(tt.spec))
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, x := range vs {
			got = append(got, x.Field+": "+x.Message+" deny="+boolText(x.Deny))
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("case %d:\n%s\nwant\n%s", i, strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
		}
	}
}

// TestEntryIsolation: a rejected entry does not reject its siblings.
func TestEntryIsolation(t *testing.T) {
	b, err := compileText(t, entryHeader+`      operatorBox:
        mutation: [{field: "spec..x", default: "1"}]
    good:
      apiTypes: {group: demo.orkestra.io, version: v1, kind: Good}
      operatorBox:
        mutation: [{field: spec.x, default: "1"}]
`, Options{})
	if err == nil || !strings.Contains(err.Error(), `spec.crds.website.operatorBox.mutation[0].field: Invalid value: "spec..x": empty key: expected a key before "." at column 6`) {
		t.Errorf("error %v", err)
	}
	if len(b.Mutators) != 1 || b.Mutators[0].ID.Part != "good" {
		t.Errorf("mutators %v", b.Mutators)
	}
}

// TestSpecPatchFormat: spec 000's patch table, through the engine: an absent field is
// an add, a present field overridden is a replace, values are strings without schema.
func TestSpecPatchFormat(t *testing.T) {
	b := mustCompile(t, entryHeader+`      operatorBox:
        mutation:
        - {field: spec.replicas, default: "2"}
        - {field: spec.logLevel, override: "info"}
`)
	res := mutate(t, b, website(map[string]any{"logLevel": "debug"}))
	got, err := res.Patch.JSON()
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"op":"replace","path":"/spec/logLevel","value":"info"},{"op":"add","path":"/spec/replicas","value":"2"}]`
	if string(got) != want {
		t.Errorf("patch %s, want %s", got, want)
	}
}

// TestCopiedValuesDoNotAlias: a map copied from one field stays independent of the
// field it came from when a later rule writes below it.
func TestCopiedValuesDoNotAlias(t *testing.T) {
	b := mustCompile(t, entryHeader+`      operatorBox:
        mutation:
        - {field: spec.a.b, override: "1"}
        - {field: spec.c, override: "{{ .spec.a }}"}
        - {field: spec.c.z, override: "2"}
`)
	res := mutate(t, b, website(map[string]any{}))
	want := map[string]any{"a": map[string]any{"b": "1"}, "c": map[string]any{"b": "1", "z": "2"}}
	if !engine.Equal(res.Object["spec"], want) {
		t.Errorf("spec %v", res.Object["spec"])
	}
}

// TestReferencesAreChargedToTheWriteBudget: a rule that copies a subtree is charged for
// it, so rules that copy the object into itself (doubling it each time) fail on the
// request's write budget instead of growing the object without bound.
func TestReferencesAreChargedToTheWriteBudget(t *testing.T) {
	var rules strings.Builder
	for i := range 16 { // without the charge: a 6.5 MB object, far past the budget
		fmt.Fprintf(&rules, "          - {field: spec.c%d, override: \"{{ .spec }}\"}\n", i)
	}
	b := mustCompile(t, `apiVersion: orkestra.orkspace.io/v1
kind: Katalog
metadata: {name: demo}
spec:
  crds:
    website:
      apiTypes: {group: demo.orkestra.io, version: v1, kind: Website, plural: websites}
      operatorBox:
        mutation:
          rules:
`+rules.String())
	set, err := engine.NewSet(b.Mutators)
	if err != nil {
		t.Fatal(err)
	}
	obj := map[string]any{"apiVersion": "demo.orkestra.io/v1", "kind": "Website", "metadata": map[string]any{"name": "w"},
		"spec": map[string]any{"title": strings.Repeat("x", 100)}}
	req := &engine.Request{Kind: schema.GroupVersionKind{Group: "demo.orkestra.io", Version: "v1", Kind: "Website"}, Operation: engine.Create, Object: obj, WriteBudget: 64 << 10}
	res, err := set.Mutate(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Failures) != 1 || !strings.Contains(res.Failures[0].Err.Error(), "budget") || res.Changed() {
		t.Fatalf("failures %v, changed %v: want the entry to fail on the write budget", res.Failures, res.Changed())
	}
}
