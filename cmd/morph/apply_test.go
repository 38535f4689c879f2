package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/morph-dev/morph/internal/engine"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// runMorph runs the CLI in-process.
func runMorph(t *testing.T, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(args, strings.NewReader(stdin), &out, &errOut)
	return out.String(), errOut.String(), code
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./cmd/morph -update to create it)", err)
	}
	if got != string(want) {
		t.Fatalf("%s differs:\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

const examples = "../../examples"

// TestQuickStart runs the README's first command and compares with its golden output.
func TestQuickStart(t *testing.T) {
	out, errOut, code := runMorph(t, "", "apply", "-p", examples+"/policies", "-f", examples+"/manifests", "--context", examples+"/context")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	golden(t, "quickstart.yaml", out)
}

func TestApplyOutputs(t *testing.T) {
	manifest, err := os.ReadFile(examples + "/manifests/checkout-pod.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, format := range []string{"yaml", "json", "patch", "diff"} {
		t.Run(format, func(t *testing.T) {
			// The manifest comes on stdin, as in `kustomize build . | morph apply -f -`.
			out, errOut, code := runMorph(t, string(manifest), "apply", "-p", examples+"/policies/gatekeeper-pod-defaults.yaml",
				"--context", examples+"/context", "-f", "-", "-o", format)
			if code != exitOK {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			golden(t, "checkout."+format, out)
		})
	}
}

func TestApplyExplain(t *testing.T) {
	_, errOut, code := runMorph(t, "", "apply", "-p", examples+"/policies/gatekeeper-pod-defaults.yaml", "--context", examples+"/context",
		"-f", examples+"/manifests/checkout-pod.yaml", "--explain")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	golden(t, "checkout.explain", strings.ReplaceAll(errOut, examples, "examples"))
}

func TestApplyErrors(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte(`apiVersion: mutations.gatekeeper.sh/v1
kind: Assign
metadata: {name: bad}
spec:
  applyTo: [{groups: [""], kinds: [Pod], versions: [v1]}]
  location: "spec.containers[name: foo]].x"
  parameters: {assign: {value: 1}}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	pod := examples + "/manifests/checkout-pod.yaml"
	pols := examples + "/policies"
	tests := []struct {
		name    string
		args    []string
		code    int
		message string
	}{
		{"no policy", []string{"apply", "-f", pod}, exitUsage, "--policy/-p is required"},
		{"no input", []string{"apply", "-p", pols}, exitUsage, "--filename/-f (or --existing) is required"},
		{"bad output", []string{"apply", "-p", pols, "-f", pod, "-o", "xml"}, exitUsage, `--output "xml": use yaml, json, patch or diff`},
		{"bad operation", []string{"apply", "-p", pols, "-f", pod, "--operation", "PATCH"}, exitUsage, `unknown operation "PATCH"`},
		{"bad source", []string{"apply", "-p", pols, "-f", pod, "--source", "Mine"}, exitUsage, `--source "Mine"`},
		{"two stdins", []string{"apply", "-p", "-", "-f", "-"}, exitUsage, "only one of"},
		{"unknown flag", []string{"apply", "--nope"}, exitUsage, "unknown flag: --nope"},
		{"malformed location", []string{"apply", "-p", bad, "-f", pod}, exitError,
			`bad.yaml: document 1 (Assign "bad"): spec.location: Invalid value: "spec.containers[name: foo]].x": unexpected "]" at column 27: expected "." or "["`},
		{"missing file", []string{"apply", "-p", pols, "-f", "nope.yaml"}, exitError, "nope.yaml: stat nope.yaml: no such file or directory"},
		{"no policies", []string{"apply", "-p", examples + "/context", "-f", pod}, exitError, "no policies found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, errOut, code := runMorph(t, "", tt.args...)
			if code != tt.code {
				t.Fatalf("exit %d, want %d; stderr: %s", code, tt.code, errOut)
			}
			if !strings.Contains(errOut, tt.message) {
				t.Fatalf("stderr %q does not contain %q", errOut, tt.message)
			}
			if tt.code != exitOK && out != "" {
				t.Fatalf("stdout should be empty on error, got %q", out)
			}
		})
	}
}

// TestApplyWorkload is the proof: morph apply of the benchmark workload gives
// exactly expected-pod.json, and applying the mutators again changes nothing.
func TestApplyWorkload(t *testing.T) {
	dir := "../../bench/testdata/gatekeeper-workload"
	out, errOut, code := runMorph(t, "", "apply", "-p", dir+"/mutators-100.yaml", "-f", dir+"/pod.json", "--context", dir+"/namespace.json", "-o", "json")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var got, want map[string]any
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(dir + "/expected-pod.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &want); err != nil {
		t.Fatal(err)
	}
	if !engine.Equal(got, want) {
		t.Fatalf("morph apply gave\n%s\nwant expected-pod.json", out)
	}
	again := filepath.Join(t.TempDir(), "mutated.json")
	if err := os.WriteFile(again, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	patch, errOut, code := runMorph(t, "", "apply", "-p", dir+"/mutators-100.yaml", "-f", again, "--context", dir+"/namespace.json", "-o", "patch")
	if code != exitOK || strings.TrimSpace(patch) != "[]" {
		t.Fatalf("second apply: exit %d, patch %s, stderr %s", code, patch, errOut)
	}
}

// katalogWithValidation is spec 000's mutateFirst example, with a switch.
func katalogWithValidation(mutateFirst bool) string {
	return fmt.Sprintf(`apiVersion: orkestra.orkspace.io/v1
kind: Katalog
metadata: {name: demo}
spec:
  crds:
    website:
      apiTypes: {group: demo.orkestra.io, version: v1alpha1, kind: Website, plural: websites}
      operatorBox:
        validation:
        - field: spec.replicas
          min: "1"
          message: "replicas must be at least 1"
          action: deny
        - field: spec.logLevel
          pattern: "^(debug|info|warn|error)$"
          message: "logLevel should be debug, info, warn or error"
          action: warn
        mutation:
        - field: spec.replicas
          default: "1"
        mutateFirst: %v
`, mutateFirst)
}

func TestApplyValidation(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	noReplicas := write("site.yaml", "apiVersion: demo.orkestra.io/v1alpha1\nkind: Website\nmetadata: {name: s, namespace: web}\nspec: {logLevel: loud}\n")
	zero := write("zero.yaml", "apiVersion: demo.orkestra.io/v1alpha1\nkind: Website\nmetadata: {name: z, namespace: web}\nspec: {replicas: 0, logLevel: info}\n")
	first := write("first.yaml", katalogWithValidation(true))
	later := write("later.yaml", katalogWithValidation(false))
	tests := []struct {
		name     string
		args     []string
		code     int
		stderr   []string
		inStdout string
	}{
		// At admission, mutation always runs first: the default makes replicas valid.
		{"admission mutates first", []string{"-p", later, "-f", noReplicas}, exitOK,
			[]string{`warning: ` + noReplicas + `: document 1 (Website "s"): Katalog/demo[website]: logLevel should be debug, info, warn or error`}, `replicas: "1"`},
		// At reconcile time validation runs first unless mutateFirst: true.
		{"reconcile validates first", []string{"-p", later, "-f", noReplicas, "--mode", "reconcile"}, exitDenied,
			[]string{`denied: ` + noReplicas + `: document 1 (Website "s"): Katalog/demo[website]: replicas must be at least 1`}, ""},
		{"reconcile with mutateFirst", []string{"-p", first, "-f", noReplicas, "--mode", "reconcile"}, exitOK, nil, `replicas: "1"`},
		{"an invalid value is denied", []string{"-p", later, "-f", zero}, exitDenied, []string{"replicas must be at least 1"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, errOut, code := runMorph(t, "", append([]string{"apply"}, tt.args...)...)
			if code != tt.code {
				t.Fatalf("exit %d, want %d; stderr: %s", code, tt.code, errOut)
			}
			for _, s := range tt.stderr {
				if !strings.Contains(errOut, s) {
					t.Errorf("stderr %q does not contain %q", errOut, s)
				}
			}
			if !strings.Contains(out, tt.inStdout) {
				t.Errorf("stdout %q does not contain %q", out, tt.inStdout)
			}
			if tt.code == exitDenied && out != "" {
				t.Errorf("a denied object must not be printed; got %q", out)
			}
		})
	}
}

// TestApplyExisting mutates existing objects as the background controller does: only
// policies with mutateExisting, matched by targetMatchConstraints.
func TestApplyExisting(t *testing.T) {
	dir := "testdata/existing"
	out, errOut, code := runMorph(t, "", "apply", "-p", dir+"/policies.yaml", "--context", dir+"/namespaces.yaml", "--existing", dir+"/configmaps.yaml", "-o", "patch")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	want := `[{"op":"add","path":"/metadata/labels","value":{"foo":"bar"}}]` + "\n[]\n"
	if out != want {
		t.Fatalf("patches:\n%s\nwant\n%s", out, want)
	}
	// At admission the same ConfigMap gets the admission-only label, not the background one.
	out, errOut, code = runMorph(t, "", "apply", "-p", dir+"/policies.yaml", "--context", dir+"/namespaces.yaml", "-f", dir+"/configmaps.yaml", "-o", "patch")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if strings.Contains(out, "foo") || strings.Count(out, `"admission":"yes"`) != 2 {
		t.Fatalf("admission patches:\n%s", out)
	}
}

// TestApplyBackground runs triggers as admission and then the background work they
// trigger (or, without -f, the policies' creation scan), golden files holding stdout
// and stderr: the mutated triggers first, then the --existing objects (changed or
// not), then the other objects the background changed.
func TestApplyBackground(t *testing.T) {
	const dir = "testdata/background"
	const rules = "testdata/existing"
	tests := []struct {
		name string
		args []string
	}{
		// Rule targets (spec 001 "Different Trigger and Target"): the CREATE of the
		// trigger Namespace mutates the ConfigMaps of namespaces labelled test=enabled.
		{"rules-create", []string{"-p", rules + "/policies.yaml", "--context", rules + "/namespaces.yaml", "--existing", rules + "/configmaps.yaml", "-f", dir + "/trigger-namespace.yaml", "--explain"}},
		// A Namespace the policy's resourceNames do not name triggers nothing.
		{"rules-not-triggered", []string{"-p", rules + "/policies.yaml", "--context", rules + "/namespaces.yaml", "--existing", rules + "/configmaps.yaml", "-f", dir + "/other-namespace.yaml", "-o", "patch"}},
		// Without -f: the scan when the policy is created.
		{"rules-scan", []string{"-p", rules + "/policies.yaml", "--context", rules + "/namespaces.yaml", "--existing", rules + "/configmaps.yaml", "-o", "diff"}},
		// Expression targets (resource.List), targetMatchConditions, request = trigger.
		{"expression-create", []string{"-p", dir + "/expression-policy.yaml", "-f", dir + "/trigger.yaml", "--existing", dir + "/existing.yaml", "--explain"}},
		{"expression-update", []string{"-p", dir + "/expression-policy.yaml", "-f", dir + "/trigger.yaml", "--old", dir + "/trigger-old.yaml", "--operation", "UPDATE", "--existing", dir + "/existing.yaml", "-o", "patch"}},
		{"expression-delete", []string{"-p", dir + "/expression-policy.yaml", "-f", dir + "/trigger-old.yaml", "--operation", "DELETE", "--existing", dir + "/existing.yaml", "-o", "patch"}},
		// A deleted trigger that also exists is gone once admitted: not listed by
		// resource.List, not printed as an existing object.
		{"expression-delete-existing", []string{"-p", dir + "/expression-policy.yaml", "-f", dir + "/trigger-old.yaml", "--operation", "DELETE", "--existing", dir + "/existing.yaml," + dir + "/trigger-old.yaml", "-o", "patch"}},
		// The scan of an expression policy runs once per existing trigger object.
		{"expression-scan", []string{"-p", dir + "/expression-policy.yaml", "--existing", dir + "/existing.yaml," + dir + "/trigger-old.yaml", "-o", "patch"}},
		// The README's example.
		{"readme-example", []string{"-p", examples + "/existing/label-configmaps.yaml", "-f", examples + "/existing/test-namespace.yaml", "--context", examples + "/existing/namespaces.yaml", "--existing", examples + "/existing/configmaps.yaml", "-o", "diff"}},
		// A subresource in the target rule is the route of the write (--explain names it).
		{"subresource-route", []string{"-p", dir + "/status-policy.yaml", "--context", dir + "/widget-crd.yaml", "--existing", dir + "/widgets.yaml", "--explain", "-o", "patch"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, errOut, code := runMorph(t, "", append([]string{"apply"}, tt.args...)...)
			golden(t, "background/"+tt.name+".golden", fmt.Sprintf("exit %d\n--- stdout\n%s--- stderr\n%s", code, out, errOut))
		})
	}
}
