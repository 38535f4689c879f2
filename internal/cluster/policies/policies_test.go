package policies

import (
	"context"
	"errors"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"

	"github.com/morph-dev/morph/internal/cluster/crds"
	"github.com/morph-dev/morph/internal/engine"
	"github.com/morph-dev/morph/internal/objects"
	"github.com/morph-dev/morph/internal/policy"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// testDialect compiles kind Test of test.morph.dev: spec.error rejects the document
// at spec.error; spec.unlocated fails the whole compile with an error that names no
// document; spec.warn adds a warning naming the document.
type testDialect struct{}

func (testDialect) Name() string { return "test" }
func (testDialect) Handles(apiVersion, kind string) bool {
	return policy.Group(apiVersion) == "test.morph.dev" && kind == "Test"
}
func (testDialect) Compile(docs []policy.Document) (*policy.Bundle, error) {
	b := &policy.Bundle{}
	var errs []error
	for _, d := range docs {
		spec, _ := d.Object["spec"].(map[string]any)
		if msg, ok := spec["error"].(string); ok {
			errs = append(errs, d.Err(field.Invalid(field.NewPath("spec", "error"), field.OmitValueType{}, msg)))
			continue
		}
		if _, ok := spec["unlocated"]; ok {
			errs = append(errs, errors.New("something failed somewhere"))
			continue
		}
		if w, ok := spec["warn"].(string); ok {
			b.Warnings = append(b.Warnings, d.Where()+": "+w)
		}
		if why, ok := spec["skip"].(string); ok {
			b.Warnings = append(b.Warnings, d.Where()+": "+why)
			b.Skipped = append(b.Skipped, policy.Skipped{Doc: d, Reason: why})
			continue
		}
		desc := engine.Descriptor{ID: engine.ID{Dialect: "test", Kind: "Test", Name: d.Name()}, Reinvocation: engine.ReinvokeNever}
		if _, ok := spec["namespaceSelector"]; ok {
			desc.Needs = []schema.GroupVersionResource{objects.NamespaceResource}
		}
		b.Mutators = append(b.Mutators, engine.Mutator{
			Descriptor: desc,
			Mutate: func(_ context.Context, _ *engine.Request, obj map[string]any, _ *engine.Writer) (map[string]any, error) {
				return obj, nil
			},
		})
	}
	return b, errors.Join(errs...)
}

var testKind = crds.Kind{Group: "test.morph.dev", Kind: "Test", Plural: "tests", Versions: []string{"v1"}, Storage: "v1"}

func testObject(name string, spec map[string]any) policyObject {
	ref := Ref{Kind: testKind, Version: "v1", Name: name, UID: types.UID("uid-" + name)}
	return policyObject{ref: ref, gen: 3, doc: policy.Document{File: ref.String(), Index: 1, Object: map[string]any{
		"apiVersion": "test.morph.dev/v1", "kind": "Test", "metadata": map[string]any{"name": name}, "spec": spec,
	}}}
}

func TestCompileIsolated(t *testing.T) {
	loader := policy.NewLoader(testDialect{})
	objs := []policyObject{
		testObject("a-unlocated", map[string]any{"unlocated": true}),
		testObject("b-bad", map[string]any{"error": "no such thing"}),
		testObject("c-warned", map[string]any{"warn": "this does nothing"}),
		testObject("d-good", map[string]any{}),
		// The Skipped fact decides, not the warning's wording.
		testObject("e-skipped", map[string]any{"skip": "in conflict with another"}),
		testObject("f-says-skipped", map[string]any{"warn": "a rule is skipped for Pods"}),
	}
	bundle, outcomes, _ := compileIsolated(loader, objs)
	var served []string
	for _, m := range bundle.Mutators {
		served = append(served, m.ID.Name)
	}
	if got := strings.Join(served, ","); got != "c-warned,d-good,f-says-skipped" {
		t.Errorf("served %s, want c-warned,d-good,f-says-skipped", got)
	}
	want := []struct {
		ready           bool
		reason, message string
	}{
		{false, ReasonCompileError, "something failed somewhere"},
		{false, ReasonCompileError, `tests.test.morph.dev/b-bad: document 1 (Test "b-bad"): spec.error: Invalid value: no such thing`},
		{true, ReasonCompiledWithWarnings, `tests.test.morph.dev/c-warned: document 1 (Test "c-warned"): this does nothing`},
		{true, ReasonCompiled, ""},
		{false, ReasonSkipped, "in conflict with another"},
		{true, ReasonCompiledWithWarnings, `tests.test.morph.dev/f-says-skipped: document 1 (Test "f-says-skipped"): a rule is skipped for Pods`},
	}
	for i, w := range want {
		o := outcomes[i]
		if o.Ready != w.ready || o.Reason != w.reason || o.Message != w.message || o.Generation != 3 {
			t.Errorf("%s: %+v, want %+v", objs[i].ref.Name, o, w)
		}
	}
}

func TestPolicyHandlerIgnoresStatusWrites(t *testing.T) {
	s := &Source{}
	h := s.policyHandler()
	obj := func(gen int64, status string, annotations map[string]string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"status": map[string]any{"x": status}}}
		u.SetGeneration(gen)
		u.SetAnnotations(annotations)
		return u
	}
	h.OnUpdate(obj(1, "a", nil), obj(1, "b", nil))
	if s.generation.Load() != 0 {
		t.Errorf("a status-only update counted as a change")
	}
	h.OnUpdate(obj(1, "a", nil), obj(2, "a", nil))
	h.OnUpdate(obj(2, "a", nil), obj(2, "a", map[string]string{"morph.dev/order": "5"}))
	if got := s.generation.Load(); got != 2 {
		t.Errorf("%d changes counted, want 2 (a spec change, an annotation change)", got)
	}
}

func TestServedVersion(t *testing.T) {
	k := crds.Kind{Group: "policies.kyverno.io", Kind: "MutatingPolicy", Plural: "mutatingpolicies", Versions: []string{"v1", "v1beta1", "v1alpha1"}, Storage: "v1beta1"}
	crd := func(served ...string) *unstructured.Unstructured {
		var vs []any
		for _, v := range []string{"v1", "v1beta1", "v1alpha1", "v2"} {
			vs = append(vs, map[string]any{"name": v, "served": strings.Contains(strings.Join(served, ","), v)})
		}
		u := &unstructured.Unstructured{Object: map[string]any{}}
		_ = unstructured.SetNestedSlice(u.Object, vs, "spec", "versions")
		return u
	}
	for _, c := range []struct {
		served []string
		want   string
		ok     bool
	}{
		{[]string{"v1", "v1beta1"}, "v1beta1", true},
		{[]string{"v1"}, "v1", true},
		{[]string{"v2"}, "", false},
	} {
		got, ok := servedVersion(crd(c.served...), k)
		if got != c.want || ok != c.ok {
			t.Errorf("served %v: got %q %t, want %q %t", c.served, got, ok, c.want, c.ok)
		}
	}
}

func TestAdmissionEvents(t *testing.T) {
	fake := record.NewFakeRecorder(10)
	e := &Events{recorder: fake}
	req := func(name string, dryRun bool) *engine.Request {
		return &engine.Request{
			Kind:      schema.GroupVersionKind{Group: "demo.morph.dev", Version: "v1", Kind: "Website"},
			Namespace: "web", Name: name, DryRun: dryRun,
			Object: map[string]any{"metadata": map[string]any{"generateName": "site-"}},
		}
	}
	e.Admission(t.Context(), req("site", true), "WebsiteMutation", "defaults applied: spec.replicas=2")
	e.Admission(t.Context(), req("", false), "WebsiteMutation", "defaults applied: spec.replicas=2")
	e.Admission(t.Context(), req("site", false), "WebsiteMutation", "defaults applied: spec.replicas=2")
	close(fake.Events)
	var got []string
	for ev := range fake.Events {
		got = append(got, ev)
	}
	if len(got) != 1 || got[0] != "Normal WebsiteMutation defaults applied: spec.replicas=2" {
		t.Errorf("events %q, want one, for the admitted object that is not a dry run", got)
	}
}
