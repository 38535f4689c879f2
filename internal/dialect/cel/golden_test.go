package cel

import (
	"cmp"
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/morph-dev/morph/internal/engine"
	"github.com/morph-dev/morph/internal/objects"
	"github.com/morph-dev/morph/internal/policy"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// goldenRequest is the optional request.yaml of a golden case.
type goldenRequest struct {
	Operation string `json:"operation"`
	Username  string `json:"username"`
	Existing  bool   `json:"existing"`
	// Namespace is the request's namespace for objects that name none (morph apply
	// --namespace).
	Namespace string `json:"namespace"`
	// Resource and SubResource make the request a subresource request
	// ("pods", "binding"; "apps/v1/deployments", "scale").
	Resource    string `json:"resource"`
	SubResource string `json:"subresource"`
}

// runGolden loads dir/policy.yaml (and dir/context.yaml), mutates dir/input.yaml and
// returns the output YAML, or the error text.
func runGolden(t *testing.T, dir string, opts Options) string {
	t.Helper()
	docs, err := policy.Read([]string{filepath.Join(dir, "policy.yaml")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	store := objects.NewStore()
	if _, err := os.Stat(filepath.Join(dir, "context.yaml")); err == nil {
		ctxDocs, err := policy.Read([]string{filepath.Join(dir, "context.yaml")}, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ctxDocs {
			if err := store.Add(d.Object); err != nil {
				t.Fatal(err)
			}
		}
	}
	opts.Objects = store
	d := New(opts)
	bundle, err := d.Compile(docs)
	if err != nil {
		return "load error: " + err.Error() + "\n"
	}
	var out strings.Builder
	for _, w := range bundle.Warnings {
		out.WriteString("# load warning: " + w + "\n")
	}
	set, err := engine.NewSet(bundle.Mutators)
	if err != nil {
		t.Fatal(err)
	}
	in, err := policy.Read([]string{filepath.Join(dir, "input.yaml")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var gr goldenRequest
	if raw, err := os.ReadFile(filepath.Join(dir, "request.yaml")); err == nil {
		if err := yaml.Unmarshal(raw, &gr); err != nil {
			t.Fatal(err)
		}
	}
	op := engine.Create
	if gr.Operation != "" {
		op = engine.Operation(gr.Operation)
	}
	for i, doc := range in {
		if i > 0 {
			out.WriteString("---\n")
		}
		gv, _ := schema.ParseGroupVersion(doc.APIVersion())
		req := &engine.Request{
			Kind:      gv.WithKind(doc.Kind()),
			Operation: op,
			Namespace: cmp.Or(doc.Namespace(), gr.Namespace),
			Name:      doc.Name(),
			Object:    doc.Object,
			UserInfo:  engine.UserInfo{Username: gr.Username},
		}
		if gr.SubResource != "" {
			req.SubResource = gr.SubResource
			req.Resource = schema.GroupVersionResource{Group: gv.Group, Version: gv.Version, Resource: gr.Resource}
			if p := strings.Split(gr.Resource, "/"); len(p) == 3 {
				req.Resource = schema.GroupVersionResource{Group: p[0], Version: p[1], Resource: p[2]}
			}
		}
		if op == engine.Update {
			req.OldObject = doc.Object
		}
		if ns, ok := store.Namespace(req.Namespace); ok {
			req.NamespaceObject = ns
		}
		ctx := context.Background()
		req.Background = gr.Existing
		before := engine.DeepCopyMap(doc.Object)
		res, err := set.Mutate(ctx, req)
		if err != nil {
			out.WriteString("error: " + err.Error() + "\n")
			continue
		}
		if !engine.Equal(before, doc.Object) {
			t.Errorf("%s: the input object was modified in place", dir)
		}
		for _, w := range res.Warnings {
			out.WriteString("# warning: " + w + "\n")
		}
		for _, kind := range []engine.NoteKind{engine.NoteSkipped, engine.NoteExemption, engine.NoteNondeterministic, engine.NoteRewrite} {
			for _, n := range res.Notes {
				if n.Kind != kind {
					continue
				}
				switch kind {
				case engine.NoteSkipped:
					out.WriteString("# skipped: " + n.ID.String() + ": " + n.Message + "\n")
				case engine.NoteExemption:
					out.WriteString("# exempted: " + n.ID.String() + ": " + n.Message + "\n")
				case engine.NoteNondeterministic:
					out.WriteString("# nondeterministic: " + n.ID.String() + ": " + n.Message + "\n")
				case engine.NoteRewrite:
					out.WriteString("# autogen " + n.Reason + ": " + n.Message + "\n")
				}
			}
		}
		y, err := yaml.Marshal(res.Object)
		if err != nil {
			t.Fatal(err)
		}
		out.Write(y)
	}
	return out.String()
}

func TestSpecExamples(t *testing.T) {
	dirs, err := filepath.Glob("testdata/spec/*")
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range dirs {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			got := runGolden(t, dir, Options{})
			checkGolden(t, filepath.Join(dir, "output.yaml"), got)
		})
	}
}

func checkGolden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if string(want) != got {
		t.Errorf("%s differs:\n--- want\n%s\n--- got\n%s", path, want, got)
	}
}

// TestKyvernoCorpus runs the Kyverno MutatingPolicy corpus: policies in the styles
// people write for Kyverno 1.19, each with its input and the output Kyverno gives.
func TestKyvernoCorpus(t *testing.T) {
	dirs, err := filepath.Glob("testdata/kyverno/*")
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) == 0 {
		t.Fatal("no corpus under testdata/kyverno")
	}
	for _, dir := range dirs {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			got := runGolden(t, dir, Options{})
			checkGolden(t, filepath.Join(dir, "output.yaml"), got)
		})
	}
}

func TestMutatingAdmissionPolicies(t *testing.T) {
	dirs, err := filepath.Glob("testdata/map/*")
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range dirs {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			got := runGolden(t, dir, Options{})
			checkGolden(t, filepath.Join(dir, "output.yaml"), got)
		})
	}
}
