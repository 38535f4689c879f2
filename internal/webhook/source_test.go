package webhook

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/morph-dev/morph/internal/objects"
	"github.com/morph-dev/morph/internal/policy"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// labelDialect compiles "test.morph.dev/v1 Label" documents (spec.key, spec.value) into
// labelMutators; spec.namespaceLabel makes the mutator need a Namespace label.
type labelDialect struct{ store *objects.Store }

func (labelDialect) Name() string { return "test" }
func (labelDialect) Handles(apiVersion, kind string) bool {
	return apiVersion == "test.morph.dev/v1" && kind == "Label"
}

func (d labelDialect) Compile(docs []policy.Document) (*policy.Bundle, error) {
	b := &policy.Bundle{}
	var errs []error
	for _, doc := range docs {
		spec, _ := doc.Object["spec"].(map[string]any)
		key, _ := spec["key"].(string)
		value, _ := spec["value"].(string)
		if key == "" {
			errs = append(errs, doc.Err(field.Required(field.NewPath("spec", "key"), "name the label to set")))
			continue
		}
		nsLabel, _ := spec["namespaceLabel"].(string)
		b.Mutators = append(b.Mutators, (&labelMutator{name: doc.Name(), key: key, value: value, nsLabel: nsLabel}).mutator())
	}
	return b, errors.Join(errs...)
}

func newLabelLoader(store *objects.Store) *policy.Loader {
	return policy.NewLoader(labelDialect{store: store})
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

const teamPolicy = `apiVersion: test.morph.dev/v1
kind: Label
metadata: {name: team}
spec: {key: team, value: a}
`

func mutatedLabels(t *testing.T, s *Server) map[string]any {
	t.Helper()
	obj := pod(nil)
	resp := admissionResponse(t, s.Handler(), "/mutate", admissionBody(t, "r", obj))
	if resp.Patch == nil {
		return nil
	}
	md, _ := applyPatch(t, obj, resp.Patch)["metadata"].(map[string]any)
	labels, _ := md["labels"].(map[string]any)
	return labels
}

func TestReloadKeepsTheLastGoodPolicies(t *testing.T) {
	dir := t.TempDir()
	policies := filepath.Join(dir, "policies")
	writeFile(t, filepath.Join(policies, "team.yaml"), teamPolicy)
	s, err := New(Options{Source: &FolderSource{Policies: policies, NewLoader: newLabelLoader}, Admission: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := mutatedLabels(t, s); got["team"] != "a" {
		t.Fatalf("labels = %v, want team=a", got)
	}

	// Broken: a policy without spec.key. The last good set stays.
	writeFile(t, filepath.Join(policies, "broken.yaml"), "apiVersion: test.morph.dev/v1\nkind: Label\nmetadata: {name: nokey}\nspec: {value: x}\n")
	s.poll()
	if got := mutatedLabels(t, s); got["team"] != "a" || len(got) != 1 {
		t.Fatalf("after a broken change, labels = %v, want the last good team=a", got)
	}
	ready := s.Readiness()
	wantErr := filepath.Join(policies, "broken.yaml") + `: document 1 (Label "nokey"): spec.key: Required value: name the label to set`
	if !ready.Ready || !strings.Contains(ready.LastError, wantErr) {
		t.Errorf("readiness = %+v, want ready with the error %q", ready, wantErr)
	}
	metrics := get(t, s.Handler(), "/metrics")
	if !strings.Contains(metrics, `morph_policy_reloads_total{outcome="failure"} 1`) {
		t.Error("the failed reload is not counted")
	}
	// Polling again without a change does not retry.
	s.poll()
	if !strings.Contains(get(t, s.Handler(), "/metrics"), `morph_policy_reloads_total{outcome="failure"} 1`) {
		t.Error("an unchanged broken folder was reloaded again")
	}

	// Fixed, with a second policy.
	writeFile(t, filepath.Join(policies, "broken.yaml"), "apiVersion: test.morph.dev/v1\nkind: Label\nmetadata: {name: tier}\nspec: {key: tier, value: web}\n")
	s.poll()
	if got := mutatedLabels(t, s); got["team"] != "a" || got["tier"] != "web" {
		t.Fatalf("after the fix, labels = %v, want team=a tier=web", got)
	}
	if ready := s.Readiness(); ready.LastError != "" || ready.Policies.Mutators != 2 {
		t.Errorf("readiness after the fix = %+v", ready)
	}
}

func TestFingerprintSeesSameSizeEdits(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "p.yaml")
	writeFile(t, path, teamPolicy)
	src := &FolderSource{Policies: dir, NewLoader: newLabelLoader}
	before, err := src.Fingerprint()
	if err != nil {
		t.Fatal(err)
	}
	stat, _ := os.Stat(path)
	writeFile(t, path, strings.Replace(teamPolicy, "value: a", "value: b", 1))
	if err := os.Chtimes(path, stat.ModTime(), stat.ModTime()); err != nil {
		t.Fatal(err)
	}
	after, err := src.Fingerprint()
	if err != nil {
		t.Fatal(err)
	}
	if before == after {
		t.Error("an edit keeping size and mtime left the fingerprint unchanged")
	}
	again, _ := src.Fingerprint()
	if again != after {
		t.Error("the fingerprint of unchanged files changed")
	}
}

func TestFolderSourceContext(t *testing.T) {
	dir := t.TempDir()
	policies := filepath.Join(dir, "policies")
	writeFile(t, filepath.Join(policies, "prod.yaml"), `apiVersion: test.morph.dev/v1
kind: Label
metadata: {name: prod-only}
spec: {key: prod, value: "yes", namespaceLabel: env}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: params, namespace: apps}
data: {a: b}
`)
	ns := filepath.Join(dir, "ns.json")
	data, _ := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": "apps", "labels": map[string]any{"env": "prod"}}})
	writeFile(t, ns, string(data))
	src := &FolderSource{Policies: policies, Context: []string{ns}, NewLoader: newLabelLoader}
	snap, err := src.Load()
	if err != nil {
		t.Fatal(err)
	}
	store := snap.Namespaces.(*objects.Store)
	if _, ok := store.Get("", "ConfigMap", "apps", "params"); !ok {
		t.Error("a non-policy document of the policy folder did not join the context")
	}
	s, err := New(Options{Source: src, Admission: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := mutatedLabels(t, s); got["prod"] != "yes" {
		t.Errorf("labels = %v: the Namespace from --context was not used", got)
	}
}

func TestFirstLoadFailureThenRecovery(t *testing.T) {
	dir := t.TempDir()
	src := &FolderSource{Policies: filepath.Join(dir, "missing"), NewLoader: newLabelLoader}
	s, err := New(Options{Source: src, Admission: true, Now: func() time.Time { return time.Unix(1700000000, 0) }})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Reload(); err == nil {
		t.Fatal("loading a missing folder succeeded")
	}
	if r := s.Readiness(); r.Ready || !strings.Contains(r.LastError, "missing") {
		t.Errorf("readiness = %+v, want not ready naming the folder", r)
	}
	writeFile(t, filepath.Join(dir, "missing", "team.yaml"), teamPolicy)
	s.poll()
	if !s.Ready() {
		t.Fatalf("not ready after the folder appeared: %+v", s.Readiness())
	}
	if got := mutatedLabels(t, s); got["team"] != "a" {
		t.Errorf("labels = %v", got)
	}
}

func TestDuplicatePoliciesFailTheLoad(t *testing.T) {
	b := &policy.Bundle{Mutators: mutators(&labelMutator{name: "x", key: "a"}, &labelMutator{name: "x", key: "b"})}
	s, err := New(Options{Source: bundleSource(b), Admission: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Reload(); err == nil || !strings.Contains(err.Error(), "Label/x") {
		t.Errorf("Reload = %v, want an error naming Label/x", err)
	}
	two := &policy.Bundle{Converters: converters(&versionConverter{}, &versionConverter{})}
	if _, err := newRuntime(&Snapshot{Bundle: two}, time.Now()); err == nil {
		t.Error("two converters of one kind were accepted")
	}
}

// TestPollClearsAReadErrorWhenTheSourceReadsAgain: a poll that cannot read the source
// is shown by /readyz until a poll reads it again; a failed load of changed files stays
// shown until a load succeeds.
func TestPollClearsAReadErrorWhenTheSourceReadsAgain(t *testing.T) {
	unreadable := errors.New("policies: permission denied")
	broken := errors.New(`policies/bad.yaml: document 1 (Label "nokey"): spec.key: is required`)
	// Each step sets the source (fingerprint, Fingerprint's and Load's errors), polls,
	// and reads /readyz.
	type step struct {
		fp               int
		readErr, loadErr error
		wantError        string // part of /readyz's lastError; "" for none
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{
			name: "unchanged files that read again clear the read error",
			steps: []step{
				{fp: 1, readErr: unreadable, wantError: "permission denied"},
				{fp: 1, readErr: unreadable, wantError: "permission denied"},
				{fp: 1},
			},
		},
		{
			name: "a failed load of changed files stays reported after the read error clears",
			steps: []step{
				{fp: 2, loadErr: broken, wantError: "spec.key"},
				{fp: 2, loadErr: broken, readErr: unreadable, wantError: "permission denied"},
				{fp: 2, loadErr: broken, wantError: "spec.key"},
				{fp: 3},
			},
		},
		{
			name: "changed files that read again are loaded",
			steps: []step{
				{fp: 1, readErr: unreadable, wantError: "permission denied"},
				{fp: 4},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := bundleSource(&policy.Bundle{Mutators: mutators(&labelMutator{name: "team", key: "team", value: "a"})})
			src.fp = 1
			s, err := New(Options{Source: src, Admission: true})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Reload(); err != nil {
				t.Fatal(err)
			}
			for i, st := range tt.steps {
				src.set(st.fp, st.readErr, st.loadErr)
				s.poll()
				var ready Readiness
				if err := json.Unmarshal([]byte(get(t, s.Handler(), "/readyz")), &ready); err != nil {
					t.Fatal(err)
				}
				switch {
				case !ready.Ready:
					t.Errorf("step %d: not ready: %+v", i, ready)
				case st.wantError == "" && (ready.LastError != "" || ready.LastErrorAt != nil):
					t.Errorf("step %d: lastError = %q, want none", i, ready.LastError)
				case st.wantError != "" && (!strings.Contains(ready.LastError, st.wantError) || ready.LastErrorAt == nil):
					t.Errorf("step %d: lastError = %q, want it to contain %q", i, ready.LastError, st.wantError)
				}
			}
		})
	}
}

// The fingerprint never reads contents: a 64 GiB (sparse) file costs no more than a
// small one. It used to be hashed in full every poll.
func TestFingerprintReadsNoContents(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "p.yaml"), teamPolicy)
	big := filepath.Join(dir, "big.yaml")
	writeFile(t, big, "")
	if err := os.Truncate(big, 64<<30); err != nil {
		t.Skip("no sparse files here:", err)
	}
	src := &FolderSource{Policies: dir, NewLoader: newLabelLoader}
	if _, err := src.Fingerprint(); err != nil {
		t.Fatal(err)
	}
}

// A FIFO in the policy folder is skipped with a note: it is never opened (which would
// block the reload loop and shutdown).
func TestFolderSourceSkipsFIFO(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "p.yaml"), teamPolicy)
	if err := syscall.Mkfifo(filepath.Join(dir, "q.yaml"), 0o600); err != nil {
		t.Skip("no FIFOs here:", err)
	}
	src := &FolderSource{Policies: dir, NewLoader: newLabelLoader}
	if _, err := src.Fingerprint(); err != nil {
		t.Fatal(err)
	}
	snap, err := src.Load()
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Bundle.Mutators) != 1 || len(snap.Notes) == 0 || !strings.Contains(snap.Notes[0], "q.yaml: not a regular file") {
		t.Fatalf("mutators %d, notes %v", len(snap.Bundle.Mutators), snap.Notes)
	}
}
