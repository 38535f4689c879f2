package gatekeeper

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/morph-dev/morph/internal/engine"
	"github.com/morph-dev/morph/internal/policy"
)

var update = flag.Bool("update", false, "rewrite the golden expected.yaml files")

// TestGolden runs every folder of testdata/golden: policy.yaml (the spec's examples),
// input.yaml (the object, a CREATE), optional namespace.yaml, and expected.yaml (the
// result), or error.txt (what the error must contain) for an example Gatekeeper refuses. Each result must also be stable: a second run changes nothing.
func TestGolden(t *testing.T) {
	dirs, err := filepath.Glob("testdata/golden/*")
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) == 0 {
		t.Fatal("no golden tests")
	}
	for _, dir := range dirs {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			docs := readDocs(t, filepath.Join(dir, "policy.yaml"))
			b, err := New(Options{}).Compile(docs)
			if want, rerr := os.ReadFile(filepath.Join(dir, "error.txt")); rerr == nil {
				// An example Gatekeeper refuses: morph must refuse it in the same terms.
				if err == nil || !strings.Contains(err.Error(), strings.TrimSpace(string(want))) {
					t.Fatalf("error %v, want it to contain %q", err, strings.TrimSpace(string(want)))
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			set, err := engine.NewSet(b.Mutators, b.Finalizers...)
			if err != nil {
				t.Fatal(err)
			}
			obj := readDocs(t, filepath.Join(dir, "input.yaml"))[0].Object
			var ns map[string]any
			if _, err := os.Stat(filepath.Join(dir, "namespace.yaml")); err == nil {
				ns = readDocs(t, filepath.Join(dir, "namespace.yaml"))[0].Object
			}
			req := objectRequest(obj, ns, engine.Create)
			res, err := set.Mutate(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Failures) > 0 {
				t.Fatalf("failures: %v", res.Warnings)
			}
			got, err := yaml.Marshal(res.Object)
			if err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join(dir, "expected.yaml")
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test -update to create it)", err)
			}
			if string(got) != string(want) {
				t.Fatalf("result differs from %s\n--- got\n%s--- want\n%s", golden, got, want)
			}
			again, err := set.Mutate(context.Background(), objectRequest(res.Object, ns, engine.Create))
			if err != nil || again.Changed() {
				t.Fatalf("not idempotent: %v %v", err, again.Patch)
			}
		})
	}
}

func readDocs(t *testing.T, file string) []policy.Document {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	docs, err := policy.Decode(file, raw)
	if err != nil {
		t.Fatal(err)
	}
	return docs
}

// objectRequest builds a request for a decoded object, as the offline surface does.
func objectRequest(obj, ns map[string]any, op engine.Operation) *engine.Request {
	apiVersion, _ := obj["apiVersion"].(string)
	kind, _ := obj["kind"].(string)
	gv, _ := schema.ParseGroupVersion(apiVersion)
	meta, _ := obj["metadata"].(map[string]any)
	namespace, _ := meta["namespace"].(string)
	name, _ := meta["name"].(string)
	return &engine.Request{
		Kind:            gv.WithKind(kind),
		Operation:       op,
		Namespace:       namespace,
		Name:            name,
		Object:          obj,
		NamespaceObject: ns,
		Source:          engine.SourceOriginal,
	}
}
