package crds

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/morph-dev/morph/internal/policy"
)

var update = flag.Bool("update", false, "rewrite testdata/crds.yaml")

// TestGolden holds the printed CRDs to testdata/crds.yaml (go test -update rewrites it).
func TestGolden(t *testing.T) {
	var buf bytes.Buffer
	if err := Write(&buf); err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "crds.yaml")
	if *update {
		if err := os.WriteFile(golden, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), want) {
		t.Errorf("morph generate crds differs from %s; run go test ./internal/cluster/crds -update and review the diff", golden)
	}
}

func internalCRD(t *testing.T, crd *apiextv1.CustomResourceDefinition) *apiextensions.CustomResourceDefinition {
	t.Helper()
	var out apiextensions.CustomResourceDefinition
	if err := apiextv1.Convert_v1_CustomResourceDefinition_To_apiextensions_CustomResourceDefinition(crd, &out, nil); err != nil {
		t.Fatal(err)
	}
	return &out
}

// TestValid runs the API server's own CRD validation (names, versions, structural
// schemas, status subresource) on every CRD, as kubectl apply would.
func TestValid(t *testing.T) {
	for _, crd := range All() {
		in := internalCRD(t, crd)
		for _, v := range crd.Spec.Versions {
			if v.Storage {
				in.Status.StoredVersions = append(in.Status.StoredVersions, v.Name) // the API server's part
			}
		}
		if errs := validation.ValidateCustomResourceDefinition(context.Background(), in); len(errs) > 0 {
			t.Errorf("%s: %v", crd.Name, errs.ToAggregate())
		}
		if !IsOurs(crd.Labels) {
			t.Errorf("%s lacks the label %s=%s", crd.Name, ManagedByLabel, ManagedByValue)
		}
		storage := 0
		for _, v := range crd.Spec.Versions {
			if v.Storage {
				storage++
			}
			if v.Subresources == nil || v.Subresources.Status == nil {
				t.Errorf("%s %s has no status subresource", crd.Name, v.Name)
			}
		}
		if storage != 1 {
			t.Errorf("%s has %d storage versions, want 1", crd.Name, storage)
		}
	}
}

// TestPoliciesFit loads the example policies and the dialects' golden policies and checks
// that each one of a kind served here validates against its CRD's schema and loses no
// field to pruning: the schemas describe every field morph reads.
func TestPoliciesFit(t *testing.T) {
	schemas := map[string]*apiextensions.CustomResourceDefinition{}
	for _, crd := range All() {
		schemas[crd.Spec.Group+"/"+crd.Spec.Names.Kind] = internalCRD(t, crd)
	}
	var paths []string
	for _, glob := range []string{
		"../../../examples/policies/*.yaml",
		"../../../examples/conversion/katalog-*.yaml",
		"../../dialect/gatekeeper/testdata/golden/*/policies.yaml",
		"../../dialect/gatekeeper/testdata/golden/*/policy.yaml",
		"../../dialect/cel/testdata/spec/*/policy.yaml",
		"../../dialect/katalog/testdata/mutate/*/katalog.yaml",
		"../../dialect/katalog/testdata/mutate/*/policy.yaml",
	} {
		m, err := filepath.Glob(glob)
		if err != nil {
			t.Fatal(err)
		}
		paths = append(paths, m...)
	}
	docs, err := policy.Read(paths, nil)
	if err != nil {
		t.Fatal(err)
	}
	checked := map[string]int{}
	for _, d := range docs {
		crd, ok := schemas[policy.Group(d.APIVersion())+"/"+d.Kind()]
		if !ok {
			continue
		}
		version := d.APIVersion()[len(crd.Spec.Group)+1:]
		var sch *apiextensions.JSONSchemaProps
		for _, v := range crd.Spec.Versions {
			if v.Name == version {
				sch = crd.Spec.Validation.OpenAPIV3Schema // one schema for all versions, hoisted
				if v.Schema != nil {
					sch = v.Schema.OpenAPIV3Schema
				}
			}
		}
		if sch == nil {
			t.Errorf("%s: version %s is not served by %s", d.Where(), version, crd.Name)
			continue
		}
		validator, _, err := apiservervalidation.NewSchemaValidator(sch)
		if err != nil {
			t.Fatal(err)
		}
		if errs := apiservervalidation.ValidateCustomResource(field.NewPath(""), d.Object, validator); len(errs) > 0 {
			t.Errorf("%s: %v", d.Where(), errs.ToAggregate())
		}
		structural, err := structuralschema.NewStructural(sch)
		if err != nil {
			t.Fatal(err)
		}
		obj := deepCopy(d.Object)
		if pruned := pruning.PruneWithOptions(obj, structural, true, structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true}); len(pruned) > 0 {
			t.Errorf("%s: the schema of %s prunes %v", d.Where(), crd.Name, pruned)
		}
		checked[d.Kind()]++
	}
	t.Logf("policies checked by kind: %v", checked)
	for _, k := range []string{"Assign", "AssignMetadata", "ModifySet", "AssignImage", "MutatingPolicy", "Katalog"} {
		if checked[k] == 0 {
			t.Errorf("no %s policy was checked: the globs find none", k)
		}
	}
}

func deepCopy(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = deepCopy(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = deepCopy(e)
		}
		return out
	}
	return v
}
