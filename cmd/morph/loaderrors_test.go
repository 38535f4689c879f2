package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/morph-dev/morph/internal/objects"
	"github.com/morph-dev/morph/internal/policy"
)

// loaderErrorSeeds are policies every dialect refuses, one per way of being wrong.
var loaderErrorSeeds = []string{
	"kind: Assign\n",
	"apiVersion: mutations.gatekeeper.sh/v1\nkind: Assing\nmetadata: {name: a}\n",
	"apiVersion: mutations.gatekeeper.sh/v1\nkind: Assign\nmetadata: {name: a}\nspec:\n  applyTo: [{groups: [''], versions: [v1], kindz: [Pod]}]\n  location: 'spec..x'\n",
	"apiVersion: mutations.gatekeeper.sh/v1\nkind: Assign\nmetadata: {name: a, annotations: {morph.dev/order: ' 5'}}\nspec: {location: spec.x}\n",
	"apiVersion: mutations.gatekeeper.sh/v1\nkind: ModifySet\nmetadata: {name: a}\nspec: {applyTo: [{groups: [''], versions: [v1], kinds: [Pod]}], location: spec.x, parameters: {operation: add}}\n",
	"apiVersion: externaldata.gatekeeper.sh/v1beta1\nkind: Provider\nmetadata: {name: p}\nspec: {url: 'http://x', timeout: 99}\n",
	"apiVersion: orkestra.orkspace.io/v1\nkind: Katalog\nmetadata: {name: k}\nspec: {crds: {w: {apiTypes: {version: v1}, operatorBox: {mutation: [{field: 'a..b', default: 1}]}}}}\n",
	"apiVersion: orkestra.orkspace.io/v1\nkind: Katalog\nmetadata: {name: k}\nspec: {crds: [{name: w, reconciler: {}, operatorBox: {}}]}\n",
	"apiVersion: admissionregistration.k8s.io/v1\nkind: MutatingAdmissionPolicy\nmetadata: {name: m}\nspec: {failurePolicy: Maybe, mutations: [{patchType: Merge}]}\n",
	"apiVersion: policies.kyverno.io/v1\nkind: MutatingPolicy\nmetadata: {name: m}\nspec: {matchConstraints: {resourceRules: [{operations: [DELETE]}]}, mutations: [{patchType: JSONPatch, jsonPatch: {expression: '1 +'}}]}\n",
}

// FuzzLoaderErrors enforces the one style of loader errors: every error that loading
// policies gives is a *policy.Error (file, document, kind and name) holding at least
// one *field.Error with a field and a detail, in the API server's own wording.
func FuzzLoaderErrors(f *testing.F) {
	for _, s := range loaderErrorSeeds {
		f.Add([]byte(s))
	}
	for _, pattern := range []string{
		"../../internal/dialect/katalog/testdata/errors/*.yaml",
		"../../internal/dialect/gatekeeper/testdata/golden/*/policy.yaml",
	} {
		files, _ := filepath.Glob(pattern)
		for _, name := range files {
			data, err := os.ReadFile(name)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(data)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		docs, err := policy.Decode("p.yaml", data)
		if err != nil {
			return // not YAML: refused before any policy is read
		}
		_, _, err = newDialects(objects.NewStore(), &dialectOptions{}).Load(docs)
		for _, e := range policy.Errors(err) {
			checkLoaderError(t, e)
		}
	})
}

// TestLoaderErrorSeeds runs the seeds as a table, so that `go test` checks them all and
// each seed is refused.
func TestLoaderErrorSeeds(t *testing.T) {
	for i, s := range loaderErrorSeeds {
		docs, err := policy.Decode("p.yaml", []byte(s))
		if err != nil {
			t.Fatalf("seed %d: %v", i, err)
		}
		_, _, err = newDialects(objects.NewStore(), &dialectOptions{}).Load(docs)
		if err == nil {
			t.Errorf("seed %d is accepted:\n%s", i, s)
			continue
		}
		for _, e := range policy.Errors(err) {
			checkLoaderError(t, e)
		}
	}
}

func checkLoaderError(t *testing.T, e error) {
	t.Helper()
	var pe *policy.Error
	if !errors.As(e, &pe) {
		t.Fatalf("loader error is not a *policy.Error: %v", e)
	}
	var fe *field.Error
	if !errors.As(e, &fe) || len(pe.Fields) == 0 {
		t.Fatalf("loader error holds no *field.Error: %v", e)
	}
	for _, fe := range pe.Fields {
		if fe.Detail == "" && fe.Type != field.ErrorTypeNotSupported && fe.Type != field.ErrorTypeDuplicate {
			t.Errorf("field error without a detail (what is wrong, what to do): %v", e)
		}
		if strings.Contains(fe.Field, "<nil>") || strings.Contains(fe.Field, "[]") {
			t.Errorf("field error without a field path: %v", e)
		}
	}
	if !strings.HasPrefix(e.Error(), "p.yaml: document ") {
		t.Errorf("loader error does not start with the file and document: %v", e)
	}
}
