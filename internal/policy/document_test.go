package policy

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

func TestDecode(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    []string // kind/name of each document
		wantIdx []int
		wantErr string
	}{
		{name: "multi-document with comments and empty documents",
			in:   "# leading comment\n---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: a\n---\n# only a comment\n---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: b\n--- # trailing\n",
			want: []string{"Pod/a", "Pod/b"}, wantIdx: []int{2, 4}},
		{name: "json", in: `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"j"}}`, want: []string{"Pod/j"}, wantIdx: []int{1}},
		{name: "list expanded", in: "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Pod\n  metadata: {name: x}\n- apiVersion: v1\n  kind: Pod\n  metadata: {name: w}\n",
			want: []string{"Pod/x", "Pod/w"}, wantIdx: []int{1, 1}},
		{name: "scalar document", in: "---\njust a string\n", wantErr: "f.yaml: document 1: expected an object with apiVersion and kind, found a string"},
		{name: "invalid yaml", in: "apiVersion: v1\nkind: [Pod\n", wantErr: "f.yaml: document 1: not valid YAML or JSON"},
		{name: "list item not an object", in: "apiVersion: v1\nkind: List\nitems: [1]\n", wantErr: "items[0]: expected an object, found a number"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			docs, err := Decode("f.yaml", []byte(tt.in))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("want error %q, got %v", tt.wantErr, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			var idx []int
			for _, d := range docs {
				got = append(got, d.Kind()+"/"+d.Name())
				idx = append(idx, d.Index)
			}
			if !reflect.DeepEqual(got, tt.want) || !reflect.DeepEqual(idx, tt.wantIdx) {
				t.Fatalf("got %v %v, want %v %v", got, idx, tt.want, tt.wantIdx)
			}
		})
	}
}

func TestDecodeNormalizesNumbers(t *testing.T) {
	docs, err := Decode("f", []byte("apiVersion: v1\nkind: X\nmetadata: {name: n}\nspec: {replicas: 3, ratio: 0.5}\n"))
	if err != nil {
		t.Fatal(err)
	}
	spec := docs[0].Object["spec"].(map[string]any)
	if _, ok := spec["replicas"].(int64); !ok {
		t.Fatalf("replicas is %T, want int64", spec["replicas"])
	}
	if _, ok := spec["ratio"].(float64); !ok {
		t.Fatalf("ratio is %T, want float64", spec["ratio"])
	}
}

func TestReadFolderInLexicalOrderSkippingHidden(t *testing.T) {
	docs, err := Read([]string{"testdata/folder"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range docs {
		got = append(got, d.Name())
	}
	if strings.Join(got, ",") != "a,b,c" {
		t.Fatalf("got %v, want a,b,c", got)
	}
}

func TestReadStdin(t *testing.T) {
	docs, err := Read([]string{"-"}, strings.NewReader("apiVersion: v1\nkind: Pod\nmetadata: {name: s}\n"))
	if err != nil || len(docs) != 1 || docs[0].File != "-" {
		t.Fatalf("got %v, %v", docs, err)
	}
	if _, err := Read([]string{"-"}, nil); err == nil {
		t.Fatal("want an error when stdin is not available")
	}
}

func TestReadMissing(t *testing.T) {
	_, err := Read([]string{"testdata/nope.yaml"}, nil)
	if err == nil || !strings.Contains(err.Error(), "testdata/nope.yaml") {
		t.Fatalf("want an error naming the file, got %v", err)
	}
}

func TestErrorLocation(t *testing.T) {
	d := Document{File: "policies/pull.yaml", Index: 2, Object: map[string]any{"kind": "Assign", "metadata": map[string]any{"name": "always-pull"}}}
	err := d.Err(field.Invalid(field.NewPath("spec", "location"), "a]", `unexpected "]" at column 2; write a path such as spec.containers[name: *].image`))
	want := `policies/pull.yaml: document 2 (Assign "always-pull"): spec.location: Invalid value: "a]": unexpected "]" at column 2; write a path such as spec.containers[name: *].image`
	if err.Error() != want {
		t.Fatalf("got  %s\nwant %s", err, want)
	}
	var pe *Error
	if !errors.As(err, &pe) || pe.Fields[0].Field != "spec.location" {
		t.Fatal("error must unwrap to *policy.Error")
	}
	var fe *field.Error
	if !errors.As(err, &fe) || fe.Type != field.ErrorTypeInvalid {
		t.Fatal("error must unwrap to *field.Error")
	}
}

type fakeDialect struct{ name, group string }

func (f fakeDialect) Name() string { return f.name }
func (f fakeDialect) Handles(apiVersion, _ string) bool {
	return Group(apiVersion) == f.group
}
func (f fakeDialect) Compile(docs []Document) (*Bundle, error) {
	var errs []error
	for _, d := range docs {
		if d.Name() == "bad" {
			errs = append(errs, d.Err(field.Forbidden(field.NewPath("spec"), "bad policy")))
		}
	}
	return &Bundle{Warnings: []string{f.name}}, errors.Join(errs...)
}

func TestLoaderRoutes(t *testing.T) {
	docs, err := Decode("p.yaml", []byte("apiVersion: a.io/v1\nkind: P\nmetadata: {name: ok}\n---\napiVersion: b.io/v1\nkind: P\nmetadata: {name: bad}\n---\napiVersion: v1\nkind: Namespace\nmetadata: {name: ns}\n---\nfoo: bar\n"))
	if err != nil {
		t.Fatal(err)
	}
	l := NewLoader(fakeDialect{"a", "a.io"}, fakeDialect{"b", "b.io"})
	b, others, err := l.Load(docs)
	errs := Errors(err)
	if len(errs) != 2 || !strings.Contains(errs[0].Error(), "document 4: apiVersion and kind are required") && !strings.Contains(errs[0].Error(), "not a Kubernetes object") {
		t.Fatalf("errors: %v", errs)
	}
	if !strings.Contains(errs[1].Error(), `p.yaml: document 2 (P "bad"): spec: Forbidden: bad policy`) {
		t.Fatalf("errors: %v", errs)
	}
	if len(others) != 1 || others[0].Kind() != "Namespace" {
		t.Fatalf("others: %v", others)
	}
	if strings.Join(b.Warnings, ",") != "a,b" {
		t.Fatalf("bundle warnings %v", b.Warnings)
	}
}

// FuzzDecode checks that no input makes the reader panic, and that every document it
// returns is an object.
func FuzzDecode(f *testing.F) {
	f.Add("apiVersion: v1\nkind: Pod\n---\nkind: List\nitems: [{}]\n")
	f.Add(`{"a":[1,2,{"b":null}]}`)
	f.Add("--- \n---\n- a\n")
	f.Fuzz(func(t *testing.T, in string) {
		docs, err := Decode("fuzz", []byte(in))
		if err != nil {
			return
		}
		for _, d := range docs {
			if d.Object == nil {
				t.Fatalf("nil object from %q", in)
			}
		}
	})
}

type kindsDialect struct{ fakeDialectForKinds }

type fakeDialectForKinds struct{}

func (fakeDialectForKinds) Name() string { return "fake" }
func (fakeDialectForKinds) Handles(apiVersion, kind string) bool {
	return apiVersion == "fake.dev/v1" && kind == "Assign"
}
func (fakeDialectForKinds) Compile(docs []Document) (*Bundle, error) { return &Bundle{}, nil }
func (kindsDialect) GroupKinds() map[string][]string {
	return map[string][]string{"fake.dev": {"Assign", "Other"}}
}

// A misspelled kind of a dialect's own group is refused with the group's kinds, never
// taken for a context object.
func TestLoaderRefusesMisspelledKinds(t *testing.T) {
	docs, err := Decode("p.yaml", []byte("apiVersion: fake.dev/v1\nkind: Assing\nmetadata: {name: a}\n---\napiVersion: fake.dev/v1\nkind: Other\nmetadata: {name: b}\n---\napiVersion: v1\nkind: Assing\nmetadata: {name: c}\n"))
	if err != nil {
		t.Fatal(err)
	}
	l := NewLoader(kindsDialect{})
	if !l.Known(docs[0]) || l.Known(docs[1]) || l.Known(docs[2]) {
		t.Fatalf("Known: %v %v %v", l.Known(docs[0]), l.Known(docs[1]), l.Known(docs[2]))
	}
	_, others, err := l.Load(docs)
	want := `p.yaml: document 1 (Assing "a"): kind: Invalid value: "Assing": not a kind of fake.dev; use one of its kinds: Assign, Other`
	if err == nil || err.Error() != want {
		t.Fatalf("got %v, want %s", err, want)
	}
	if len(others) != 2 {
		t.Fatalf("others = %d, want 2", len(others))
	}
}

// One reading of morph.dev/order for every dialect: " 5" used to be an error for
// Gatekeeper and accepted for Katalog.
func TestDocumentOrder(t *testing.T) {
	tests := []struct {
		ann     any
		want    int
		wantErr string
	}{
		{nil, 0, ""},
		{"10", 10, ""},
		{"-3", -3, ""},
		{" 5", 0, `metadata.annotations[morph.dev/order]: Invalid value: " 5": not a whole number; give one such as "10"`},
		{"first", 0, `Invalid value: "first": not a whole number`},
		{int64(5), 0, `Invalid value: 5: annotations are strings, found a number; write a whole number in quotes`},
	}
	for _, tt := range tests {
		md := map[string]any{"name": "p"}
		if tt.ann != nil {
			md["annotations"] = map[string]any{OrderAnnotation: tt.ann}
		}
		d := Document{File: "f", Index: 1, Object: map[string]any{"apiVersion": "v1", "kind": "X", "metadata": md}}
		got, err := d.Order()
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%v: got %v, %v; want an error with %q", tt.ann, got, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("%v: got %v, %v; want %d", tt.ann, got, err, tt.want)
		}
	}
}

func TestParsePath(t *testing.T) {
	for _, tt := range []struct{ text, want string }{
		{"spec", "spec"},
		{"spec.mutations[0].patchType", "spec.mutations[0].patchType"},
		{"metadata.annotations[morph.dev/order]", "metadata.annotations[morph.dev/order]"},
		{"spec.x[1][2].y", "spec.x[1][2].y"},
		{"a.b.c", "a.b.c"},
	} {
		if got := ParsePath(tt.text).String(); got != tt.want {
			t.Errorf("ParsePath(%q) = %q", tt.text, got)
		}
	}
	if p := ParsePath("spec.mutations[0]"); p.Root().String() != "spec" {
		t.Errorf("the path is not parsed into its parts: root %q", p.Root())
	}
}

// TestJoinDocumentsAggregates: the field errors of one document, from however many
// joins, become one *Error with a field.ErrorList.
func TestJoinDocumentsAggregates(t *testing.T) {
	a := Document{File: "p.yaml", Index: 1, Object: map[string]any{"kind": "Assign", "metadata": map[string]any{"name": "a"}}}
	b := Document{File: "p.yaml", Index: 2, Object: map[string]any{"kind": "Assign", "metadata": map[string]any{"name": "b"}}}
	err := JoinDocuments(
		errors.Join(a.Required("spec.location", "give it"), b.Required("spec", "give it")),
		a.NotSupported("spec.match.scope", "x", "Cluster", "Namespaced"),
	)
	parts := Errors(err)
	if len(parts) != 2 {
		t.Fatalf("%d parts, want one a document: %v", len(parts), err)
	}
	var pe *Error
	if !errors.As(parts[0], &pe) || len(pe.Fields) != 2 || pe.Doc.Index != 1 {
		t.Fatalf("document 1 not aggregated: %#v", parts[0])
	}
	want := "p.yaml: document 1 (Assign \"a\"): spec.location: Required value: give it\n" +
		"p.yaml: document 1 (Assign \"a\"): spec.match.scope: Unsupported value: \"x\": supported values: \"Cluster\", \"Namespaced\""
	if parts[0].Error() != want {
		t.Fatalf("got\n%s\nwant\n%s", parts[0], want)
	}
}
