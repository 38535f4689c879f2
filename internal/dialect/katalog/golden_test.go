package katalog

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	jsonpatch "github.com/evanphx/json-patch"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/morph-dev/morph/internal/engine"
	"github.com/morph-dev/morph/internal/objects"
	"github.com/morph-dev/morph/internal/policy"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata")

// readDocs decodes a testdata file.
func readDocs(t testing.TB, file string) []policy.Document {
	t.Helper()
	docs, err := policy.Read([]string{file}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return docs
}

// compileDir compiles dir/katalog.yaml with dir/context.yaml (if any) as context.
func compileDir(t testing.TB, dir string) *policy.Bundle {
	t.Helper()
	_, b := compileDirEntries(t, dir)
	return b
}

func compileDirEntries(t testing.TB, dir string) ([]*Entry, *policy.Bundle) {
	t.Helper()
	store := objects.NewStore()
	if _, err := os.Stat(filepath.Join(dir, "context.yaml")); err == nil {
		for _, d := range readDocs(t, filepath.Join(dir, "context.yaml")) {
			if err := store.Add(d.Object); err != nil {
				t.Fatal(err)
			}
		}
	}
	es, b, err := New(Options{Objects: store}).(*Dialect).CompileEntries(readDocs(t, filepath.Join(dir, "katalog.yaml")))
	if err != nil {
		t.Fatal(err)
	}
	return es, b
}

// golden compares got with the file, or rewrites the file under -update.
func golden(t *testing.T, file string, got []byte) {
	t.Helper()
	if *update {
		if err := os.WriteFile(file, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if string(want) != string(got) {
		t.Errorf("%s differs:\n--- want\n%s\n--- got\n%s", file, want, got)
	}
}

func toYAML(t testing.TB, v any) []byte {
	t.Helper()
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func requestFor(obj map[string]any, op engine.Operation) *engine.Request {
	gv, _ := schema.ParseGroupVersion(obj["apiVersion"].(string))
	meta, _ := obj["metadata"].(map[string]any)
	name, _ := meta["name"].(string)
	ns, _ := meta["namespace"].(string)
	return &engine.Request{
		Kind:      gv.WithKind(obj["kind"].(string)),
		Operation: op,
		Name:      name,
		Namespace: ns,
		Object:    obj,
	}
}

// TestGoldenMutate runs every testdata/mutate case through the engine: the final
// object (expected.yaml), the RFC 6902 patch (patch.json), which must also apply to the
// input with the API server's JSON-patch library, the event text (event.txt), the
// load warnings (warnings.txt) and, when the entry validates, the violations of the
// input and of the result (violations.txt).
func TestGoldenMutate(t *testing.T) {
	dirs, _ := filepath.Glob("testdata/mutate/*")
	if len(dirs) == 0 {
		t.Fatal("no golden cases")
	}
	for _, dir := range dirs {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			b := compileDir(t, dir)
			set, err := engine.NewSet(b.Mutators)
			if err != nil {
				t.Fatal(err)
			}
			input := readDocs(t, filepath.Join(dir, "input.yaml"))[0].Object
			before := toYAML(t, input)
			res, err := set.Mutate(context.Background(), requestFor(input, engine.Create))
			if err != nil {
				t.Fatal(err)
			}
			if got := toYAML(t, input); string(got) != string(before) {
				t.Fatalf("the input object was modified in place:\n%s", got)
			}
			if len(res.Failures) > 0 {
				t.Fatalf("failures: %v", res.Warnings)
			}
			golden(t, filepath.Join(dir, "expected.yaml"), toYAML(t, res.Object))
			patch, err := res.Patch.JSON()
			if err != nil {
				t.Fatal(err)
			}
			golden(t, filepath.Join(dir, "patch.json"), append(patch, '\n'))
			checkPatchApplies(t, input, patch, res.Object)

			var events []string
			for _, n := range res.Notes {
				if n.Kind == engine.NoteEvent {
					events = append(events, n.Reason+": "+n.Message)
				}
			}
			golden(t, filepath.Join(dir, "event.txt"), []byte(strings.Join(events, "\n")+"\n"))
			golden(t, filepath.Join(dir, "warnings.txt"), []byte(strings.Join(b.Warnings, "\n")+"\n"))
			if len(b.Validators) > 0 {
				vals := engine.NewValidators(b.Validators)
				var lines []string
				for _, o := range []struct {
					name string
					obj  map[string]any
				}{{"input", input}, {"result", res.Object}} {
					vs, warns, _ := vals.Validate(context.Background(), requestFor(o.obj, engine.Create), o.obj)
					lines = append(lines, o.name+":")
					for _, v := range vs {
						lines = append(lines, "  "+v.ID.String()+" "+v.Field+": "+v.Message+" deny="+boolText(v.Deny))
					}
					lines = append(lines, warns...)
				}
				golden(t, filepath.Join(dir, "violations.txt"), []byte(strings.Join(lines, "\n")+"\n"))
			}
		})
	}
}

func boolText(b bool) string {
	if b {
		return "true"
	}
	return "false"
}

func checkPatchApplies(t *testing.T, input map[string]any, patch []byte, want map[string]any) {
	t.Helper()
	doc, err := json.Marshal(input)
	if err != nil {
		t.Fatal(err)
	}
	p, err := jsonpatch.DecodePatch(patch)
	if err != nil {
		t.Fatalf("patch does not decode: %v", err)
	}
	out, err := p.Apply(doc)
	if err != nil {
		t.Fatalf("patch does not apply: %v\n%s", err, patch)
	}
	wantJSON, _ := json.Marshal(want)
	if !jsonpatch.Equal(out, wantJSON) {
		t.Fatalf("patched input differs from the result:\n%s\n%s", out, wantJSON)
	}
}

// TestGoldenConvert converts every testdata/convert case's input to the version in
// its "to" file, and back again, which must give back the input.
func TestGoldenConvert(t *testing.T) {
	dirs, _ := filepath.Glob("testdata/convert/*")
	if len(dirs) == 0 {
		t.Fatal("no golden cases")
	}
	for _, dir := range dirs {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			b := compileDir(t, dir)
			if len(b.Converters) != 1 {
				t.Fatalf("want one converter per group and kind, got %d", len(b.Converters))
			}
			conv := b.Converters[0]
			input := readDocs(t, filepath.Join(dir, "input.yaml"))[0].Object
			before := toYAML(t, input)
			to, err := os.ReadFile(filepath.Join(dir, "to"))
			if err != nil {
				t.Fatal(err)
			}
			out, err := conv.Convert(context.Background(), input, strings.TrimSpace(string(to)))
			if err != nil {
				t.Fatal(err)
			}
			if string(toYAML(t, input)) != string(before) {
				t.Fatal("the input object was modified in place")
			}
			golden(t, filepath.Join(dir, "expected.yaml"), toYAML(t, out))
			back, err := conv.Convert(context.Background(), out, input["apiVersion"].(string))
			if err != nil {
				t.Fatal(err)
			}
			golden(t, filepath.Join(dir, "roundtrip.yaml"), toYAML(t, back))
		})
	}
}

// TestGoldenErrors compiles every testdata/errors file and compares the error text.
func TestGoldenErrors(t *testing.T) {
	files, _ := filepath.Glob("testdata/errors/*.yaml")
	if len(files) == 0 {
		t.Fatal("no golden cases")
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".yaml"), func(t *testing.T) {
			b, err := New(Options{}).Compile(readDocs(t, f))
			if err == nil {
				t.Fatalf("no error; bundle %+v", b)
			}
			var perr *policy.Error
			if !errors.As(err, &perr) {
				t.Fatalf("error is not located: %v", err)
			}
			golden(t, strings.TrimSuffix(f, ".yaml")+".golden", []byte(err.Error()+"\n"))
		})
	}
}
