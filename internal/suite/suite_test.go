package suite

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/morph-dev/morph/internal/dialect/cel"
	"github.com/morph-dev/morph/internal/dialect/gatekeeper"
	"github.com/morph-dev/morph/internal/dialect/katalog"
	"github.com/morph-dev/morph/internal/objects"
	"github.com/morph-dev/morph/internal/policy"
)

var updateGolden = flag.Bool("update", false, "rewrite the golden files")

// hooks are the dialects, as cmd/morph passes them.
func hooks() Hooks {
	return Hooks{
		NewLoader: func(store *objects.Store, kyvernoCLI bool) *policy.Loader {
			return policy.NewLoader(
				gatekeeper.New(gatekeeper.Options{Objects: store}),
				cel.New(cel.Options{Objects: store, KyvernoCLI: kyvernoCLI}),
				katalog.New(katalog.Options{Objects: store}),
			)
		},
	}
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name)
	if *updateGolden {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./internal/suite -args -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s differs:\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

func TestDiscover(t *testing.T) {
	files, err := Discover([]string{"testdata/discover", "testdata/discover/c/other-name.yaml", "testdata/discover/c/kyverno-style.yaml", "testdata/discover/a/kyverno-test.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	want := []File{
		{"testdata/discover/a/b/morph-test.yaml", FormatMorph},
		{"testdata/discover/a/kyverno-test.yaml", FormatKyverno},
		{"testdata/discover/c/pods.morph-test.yaml", FormatMorph},
		// Named explicitly: taken whatever the name, the format from the apiVersion.
		{"testdata/discover/c/other-name.yaml", FormatMorph},
		{"testdata/discover/c/kyverno-style.yaml", FormatKyverno},
	}
	if !reflect.DeepEqual(files, want) {
		t.Fatalf("Discover:\n got %v\nwant %v", files, want)
	}
	if _, err := Discover([]string{"testdata/no-such-folder"}); err == nil {
		t.Fatal("a missing path is an error")
	}
	if files, err := Discover([]string{"testdata/golden"}); err != nil || len(files) != 0 {
		t.Fatalf("a folder without tests: %v, %v", files, err)
	}
}

// TestSuites runs each testdata suite and compares the table with its golden file: the
// golden files show every comparison rule passing and failing.
func TestSuites(t *testing.T) {
	for _, dir := range []string{"kyverno/tidy", "kyverno/status", "kyverno/map", "kyverno/values", "kyverno/subresources", "kyverno/legacy", "kyverno/unsupported", "morph/cases", "morph/loaderror"} {
		t.Run(dir, func(t *testing.T) {
			files, err := Discover([]string{filepath.Join("testdata", dir)})
			if err != nil || len(files) != 1 {
				t.Fatalf("Discover: %v %v", files, err)
			}
			rep := (&Runner{Hooks: hooks()}).Run(context.Background(), files)
			var b bytes.Buffer
			if err := WriteTable(&b, rep); err != nil {
				t.Fatal(err)
			}
			golden(t, strings.ReplaceAll(dir, "/", "-")+".txt", b.Bytes())
		})
	}
}

func TestUpdate(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"morph-test.yaml", "policies.yaml"} {
		data, err := os.ReadFile(filepath.Join("testdata", "morph", "update", name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	files := []File{{Path: filepath.Join(dir, "morph-test.yaml"), Format: FormatMorph}}
	rep := (&Runner{Hooks: hooks(), Update: true}).Run(context.Background(), files)
	if rep.Failed() != 0 || len(rep.Updated) != 1 {
		t.Fatalf("update: %d failed, %d files updated: %+v", rep.Failed(), len(rep.Updated), rep.Cases)
	}
	if !strings.Contains(rep.Updated[0].Diff, "+    object:") {
		t.Fatalf("the diff shows no new object:\n%s", rep.Updated[0].Diff)
	}
	for _, name := range []string{"morph-test.yaml", "d-expected.yaml"} {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		golden(t, "update-"+name, got)
	}
	// The snapshots now pass without --update, and a second update changes nothing.
	rep = (&Runner{Hooks: hooks()}).Run(context.Background(), files)
	if rep.Failed() != 0 {
		var b bytes.Buffer
		_ = WriteTable(&b, rep)
		t.Fatalf("after --update:\n%s", b.String())
	}
	rep = (&Runner{Hooks: hooks(), Update: true}).Run(context.Background(), files)
	if len(rep.Updated) != 0 {
		t.Fatalf("a second --update rewrote %v", rep.Updated)
	}
}

func TestEqualKyverno(t *testing.T) {
	obj := func(s string) map[string]any {
		var m map[string]any
		if err := yamlUnmarshal(s, &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	tests := []struct {
		name             string
		actual, expected string
		equal            bool
	}{
		{"identical", "a: 1\nb: [x, y]", "a: 1\nb: [x, y]", true},
		{"empty map on one side is tidied", "a: 1\nm: {}", "a: 1", true},
		{"null on one side is tidied", "a: 1\nn: null", "a: 1", true},
		{"a map left empty by tidying goes too", "a: 1\nm: {n: null, l: []}", "a: 1", true},
		{"empty list is tidied", "a: 1\nl: []", "a: 1", true},
		{"nulls inside lists are dropped", "l: [x, null]", "l: [x]", true},
		{"list order matters", "l: [x, y]", "l: [y, x]", false},
		{"a field only in actual differs", "a: 1\nb: 2", "a: 1", false},
		{"a field only in expected differs", "a: 1", "a: 1\nb: 2", false},
		{"numbers by value", "a: 1", "a: 1.0", true},
		{"string and number differ", "a: '1'", "a: 1", false},
		{"false is not tidied", "a: false", "{}", false},
		{"empty string is not tidied", "a: ''", "{}", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := equalKyverno(obj(tt.actual), obj(tt.expected))
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.equal {
				t.Fatalf("equalKyverno = %v, want %v", got, tt.equal)
			}
		})
	}
}

func yamlUnmarshal(s string, v any) error { return yaml.Unmarshal([]byte(s), v) }

func TestEqualExact(t *testing.T) {
	tests := []struct {
		name  string
		a, b  any
		equal bool
	}{
		{"numbers by value", map[string]any{"n": int64(2)}, map[string]any{"n": 2.0}, true},
		{"empty map is a field", map[string]any{"m": map[string]any{}}, map[string]any{}, false},
		{"null is a field", map[string]any{"m": nil}, map[string]any{}, false},
		{"list order matters", []any{"a", "b"}, []any{"b", "a"}, false},
		{"nested equal", map[string]any{"l": []any{map[string]any{"x": true}}}, map[string]any{"l": []any{map[string]any{"x": true}}}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := equalExact(tt.a, tt.b); got != tt.equal {
				t.Fatalf("equalExact = %v, want %v", got, tt.equal)
			}
		})
	}
}

func TestOutputs(t *testing.T) {
	rep := &Report{Cases: []Case{
		{File: "a/morph-test.yaml", Test: "t", Name: "ok", Passed: true},
		{File: "a/morph-test.yaml", Test: "t", Name: "bad <&>", Message: "differs\nsecond line", Diff: "--- expected\n+++ actual\n-x\n+y\n"},
		{File: "b/kyverno-test.yaml", Test: "k", Name: "p r: pass", Passed: true},
	}}
	for name, write := range map[string]func(*bytes.Buffer) error{
		"report.txt":  func(b *bytes.Buffer) error { return WriteTable(b, rep) },
		"report.json": func(b *bytes.Buffer) error { return WriteJSON(b, rep) },
		"report.xml":  func(b *bytes.Buffer) error { return WriteJUnit(b, rep) },
	} {
		var b bytes.Buffer
		if err := write(&b); err != nil {
			t.Fatal(err)
		}
		golden(t, name, b.Bytes())
	}
}
