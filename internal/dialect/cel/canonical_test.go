package cel

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/morph-dev/morph/internal/engine"
	"github.com/morph-dev/morph/internal/policy"
)

// decodeJSON decodes a JSON object as the engine does (numbers normalized).
func decodeJSON(t testing.TB, s string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatalf("decode %s: %v", s, err)
	}
	engine.Normalize(m)
	return m
}

func mustJSON(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestApplyPatch(t *testing.T) {
	cases := []struct {
		name  string
		obj   string
		patch string
		want  string
		err   string
	}{
		{name: "add member", obj: `{"a":{"b":1}}`, patch: `[{"op":"add","path":"/a/c","value":2}]`, want: `{"a":{"b":1,"c":2}}`},
		{name: "add replaces a member", obj: `{"a":1}`, patch: `[{"op":"add","path":"/a","value":{"x":true}}]`, want: `{"a":{"x":true}}`},
		{name: "replace member", obj: `{"a":{"b":1}}`, patch: `[{"op":"replace","path":"/a/b","value":"x"}]`, want: `{"a":{"b":"x"}}`},
		{name: "remove member", obj: `{"a":{"b":1,"c":2}}`, patch: `[{"op":"remove","path":"/a/b"}]`, want: `{"a":{"c":2}}`},
		{name: "add null", obj: `{"a":{}}`, patch: `[{"op":"add","path":"/a/b","value":null}]`, want: `{"a":{"b":null}}`},
		{name: "escaped slash", obj: `{"metadata":{"annotations":{}}}`, patch: `[{"op":"add","path":"/metadata/annotations/example.com~1cpu","value":"500m"}]`, want: `{"metadata":{"annotations":{"example.com/cpu":"500m"}}}`},
		{name: "escaped tilde", obj: `{"a":{"x~y":1}}`, patch: `[{"op":"replace","path":"/a/x~0y","value":2}]`, want: `{"a":{"x~y":2}}`},
		{name: "escaped tilde then one", obj: `{"a":{}}`, patch: `[{"op":"add","path":"/a/~01","value":1}]`, want: `{"a":{"~1":1}}`},
		{name: "empty key", obj: `{"a":{}}`, patch: `[{"op":"add","path":"/a/","value":1}]`, want: `{"a":{"":1}}`},
		{name: "append", obj: `{"l":[1,2]}`, patch: `[{"op":"add","path":"/l/-","value":3}]`, want: `{"l":[1,2,3]}`},
		{name: "append to empty", obj: `{"l":[]}`, patch: `[{"op":"add","path":"/l/-","value":1}]`, want: `{"l":[1]}`},
		{name: "insert first", obj: `{"l":[1,2]}`, patch: `[{"op":"add","path":"/l/0","value":0}]`, want: `{"l":[0,1,2]}`},
		{name: "insert middle", obj: `{"l":[1,3]}`, patch: `[{"op":"add","path":"/l/1","value":2}]`, want: `{"l":[1,2,3]}`},
		{name: "insert at end", obj: `{"l":[1,2]}`, patch: `[{"op":"add","path":"/l/2","value":3}]`, want: `{"l":[1,2,3]}`},
		{name: "replace element", obj: `{"l":[1,2]}`, patch: `[{"op":"replace","path":"/l/1","value":{"b":2}}]`, want: `{"l":[1,{"b":2}]}`},
		{name: "remove first", obj: `{"l":[1,2,3]}`, patch: `[{"op":"remove","path":"/l/0"}]`, want: `{"l":[2,3]}`},
		{name: "remove last", obj: `{"l":[1,2,3]}`, patch: `[{"op":"remove","path":"/l/2"}]`, want: `{"l":[1,2]}`},
		{name: "remove only", obj: `{"l":[1]}`, patch: `[{"op":"remove","path":"/l/0"}]`, want: `{"l":[]}`},
		{name: "into element", obj: `{"spec":{"containers":[{"name":"a"},{"name":"b"}]}}`, patch: `[{"op":"add","path":"/spec/containers/1/image","value":"nginx"}]`, want: `{"spec":{"containers":[{"name":"a"},{"image":"nginx","name":"b"}]}}`},
		{
			name:  "sequence on one list",
			obj:   `{"l":[1,2,3,4]}`,
			patch: `[{"op":"remove","path":"/l/0"},{"op":"add","path":"/l/1","value":9},{"op":"add","path":"/l/-","value":5},{"op":"replace","path":"/l/0","value":0}]`,
			want:  `{"l":[0,9,3,4,5]}`,
		},
		{
			name:  "sequence in one map",
			obj:   `{"a":{"b":{}}}`,
			patch: `[{"op":"add","path":"/a/b/c","value":1},{"op":"add","path":"/a/b/d","value":[]},{"op":"add","path":"/a/b/d/-","value":1},{"op":"remove","path":"/a/b/c"}]`,
			want:  `{"a":{"b":{"d":[1]}}}`,
		},
		{name: "replace missing", obj: `{"a":{}}`, patch: `[{"op":"replace","path":"/a/b","value":1}]`, err: `replace "/a/b": no member "b"`},
		{name: "remove missing", obj: `{"a":{}}`, patch: `[{"op":"remove","path":"/a/b"}]`, err: `remove "/a/b": no member "b"`},
		{name: "missing parent", obj: `{}`, patch: `[{"op":"add","path":"/a/b","value":1}]`, err: `add "/a/b": no member "a"`},
		{name: "through a scalar", obj: `{"a":"s"}`, patch: `[{"op":"add","path":"/a/b","value":1}]`, err: `add "/a/b": no member "b" in a string`},
		{name: "through null", obj: `{"a":null}`, patch: `[{"op":"add","path":"/a/b","value":1}]`, err: `add "/a/b": no member "b" in null`},
		{name: "index out of range", obj: `{"l":[1]}`, patch: `[{"op":"replace","path":"/l/1","value":1}]`, err: `index 1 is out of range (the list has 1 elements)`},
		{name: "insert out of range", obj: `{"l":[1]}`, patch: `[{"op":"add","path":"/l/2","value":1}]`, err: `index 2 is out of range for add`},
		{name: "leading zero", obj: `{"l":[1,2]}`, patch: `[{"op":"replace","path":"/l/01","value":1}]`, err: `"01" is not a list index`},
		{name: "negative index", obj: `{"l":[1,2]}`, patch: `[{"op":"remove","path":"/l/-1"}]`, err: `"-1" is not a list index`},
		{name: "dash replace", obj: `{"l":[1]}`, patch: `[{"op":"replace","path":"/l/-","value":1}]`, err: `"-" (the end of the list) can only be added to`},
		{name: "bad escape", obj: `{}`, patch: `[{"op":"add","path":"/a~2","value":1}]`, err: `"~" must be followed by 0 or 1`},
		{name: "no slash", obj: `{}`, patch: `[{"op":"add","path":"a","value":1}]`, err: `a JSON Pointer starts with "/"`},
		{name: "root", obj: `{}`, patch: `[{"op":"replace","path":"","value":{}}]`, err: `the root cannot be patched`},
		{name: "move", obj: `{"a":1}`, patch: `[{"op":"move","path":"/b"}]`, err: `unsupported operation`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			obj := decodeJSON(t, tc.obj)
			before := engine.DeepCopyMap(obj)
			var p engine.Patch
			if err := json.Unmarshal([]byte(tc.patch), &p); err != nil {
				t.Fatal(err)
			}
			for i := range p {
				p[i].Value = engine.Normalize(p[i].Value)
			}
			w := engine.NewWriter()
			got, err := applyPatch(obj, p, w)
			if !engine.Equal(before, obj) {
				t.Fatalf("the input was modified: %s, was %s", mustJSON(t, obj), mustJSON(t, before))
			}
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error = %v, want it to contain %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if want := decodeJSON(t, tc.want); !engine.Equal(got, want) {
				t.Fatalf("got %s, want %s", mustJSON(t, got), tc.want)
			}
			var paths []string
			for _, op := range p {
				paths = append(paths, op.Path)
			}
			if !slices.Equal(w.Paths(), paths) {
				t.Fatalf("changed paths %q, want %q", w.Paths(), paths)
			}
		})
	}
}

// TestApplyPatchCopyOnWrite checks that applyPatch copies each container once and then
// writes the copies in place, and that siblings stay shared with the input.
func TestApplyPatchCopyOnWrite(t *testing.T) {
	obj := decodeJSON(t, `{"a":{"b":{"c":1}},"l":[{"x":1},{"y":2}],"s":{"k":"v"}}`)
	before := engine.DeepCopyMap(obj)
	w := engine.NewWriter()
	first, err := applyPatch(obj, engine.Patch{{Op: "add", Path: "/a/b/d", Value: int64(2)}, {Op: "add", Path: "/l/0/z", Value: int64(3)}}, w)
	if err != nil {
		t.Fatal(err)
	}
	second, err := applyPatch(first, engine.Patch{{Op: "add", Path: "/a/b/e", Value: int64(4)}, {Op: "remove", Path: "/l/1"}}, w)
	if err != nil {
		t.Fatal(err)
	}
	if !engine.Equal(obj, before) {
		t.Fatalf("the input was modified: %s", mustJSON(t, obj))
	}
	if want := decodeJSON(t, `{"a":{"b":{"c":1,"d":2,"e":4}},"l":[{"x":1,"z":3}],"s":{"k":"v"}}`); !engine.Equal(second, want) {
		t.Fatalf("got %s", mustJSON(t, second))
	}
	// The second patch wrote the owned copies in place.
	if !sameMap(first, second) || !sameMap(first["a"].(map[string]any), second["a"].(map[string]any)) {
		t.Fatalf("owned containers were copied again")
	}
	// Untouched containers are shared with the input.
	if !sameMap(obj["s"].(map[string]any), second["s"].(map[string]any)) {
		t.Fatalf("an untouched member was copied")
	}
	if sameMap(obj, first) || sameMap(obj["a"].(map[string]any), first["a"].(map[string]any)) {
		t.Fatalf("the input's containers were written")
	}
}

func sameMap(a, b map[string]any) bool {
	a["\x00probe"] = true
	_, same := b["\x00probe"]
	delete(a, "\x00probe")
	return same
}

// TestApplyChanges applies patches computed against a canonical form to originals that
// differ from it where the policy did not write.
func TestApplyChanges(t *testing.T) {
	cases := []struct {
		name                 string
		orig, canonical, out string
		want                 string
		paths                []string
	}{
		{
			name:      "untouched fields keep their form",
			orig:      `{"spec":{"cpu":"0.5"},"metadata":{"name":"a"}}`,
			canonical: `{"spec":{"cpu":"500m"},"metadata":{"name":"a"},"status":{}}`,
			out:       `{"spec":{"cpu":"500m"},"metadata":{"name":"a","annotations":{"cpu":"500m"}},"status":{}}`,
			want:      `{"spec":{"cpu":"0.5"},"metadata":{"name":"a","annotations":{"cpu":"500m"}}}`,
			paths:     []string{"/metadata/annotations"},
		},
		{
			name:      "below a container only the canonical form has",
			orig:      `{"spec":{"containers":[{"name":"a"}]}}`,
			canonical: `{"spec":{"containers":[{"name":"a","resources":{}}]},"status":{}}`,
			out:       `{"spec":{"containers":[{"name":"a","resources":{"limits":{"cpu":"1"},"requests":{"cpu":"1"}}}]},"status":{"phase":"x"}}`,
			want:      `{"spec":{"containers":[{"name":"a","resources":{"limits":{"cpu":"1"},"requests":{"cpu":"1"}}}]},"status":{"phase":"x"}}`,
			paths:     []string{"/spec/containers/0/resources", "/status"},
		},
		{
			name:      "replace of a member the original lacks",
			orig:      `{"spec":{}}`,
			canonical: `{"spec":{"n":0}}`,
			out:       `{"spec":{"n":3}}`,
			want:      `{"spec":{"n":3}}`,
			paths:     []string{"/spec/n"},
		},
		{
			name:      "remove of a member the original lacks",
			orig:      `{"spec":{"a":1}}`,
			canonical: `{"spec":{"a":1,"n":0}}`,
			out:       `{"spec":{}}`,
			want:      `{"spec":{}}`,
			paths:     []string{"/spec/a"},
		},
		{
			name:      "removal of a container only the canonical form has",
			orig:      `{"spec":{}}`,
			canonical: `{"spec":{"r":{"x":1}}}`,
			out:       `{"spec":{"r":{}}}`,
			want:      `{"spec":{"r":{}}}`,
			paths:     []string{"/spec/r"},
		},
		{
			name:      "null where the canonical form has a map",
			orig:      `{"spec":{"r":null}}`,
			canonical: `{"spec":{"r":{}}}`,
			out:       `{"spec":{"r":{"a":1,"b":2}}}`,
			want:      `{"spec":{"r":{"a":1,"b":2}}}`,
			paths:     []string{"/spec/r"},
		},
		{
			name:      "list elements inserted before a changed one",
			orig:      `{"l":[{"n":"a","q":"0.5"},{"n":"b"}]}`,
			canonical: `{"l":[{"n":"a","q":"500m","r":{}},{"n":"b","r":{}}]}`,
			out:       `{"l":[{"n":"new"},{"n":"a","q":"500m","r":{}},{"n":"b","r":{"x":1}}]}`,
			want:      `{"l":[{"n":"new"},{"n":"a","q":"0.5"},{"n":"b","r":{"x":1}}]}`,
			paths:     []string{"/l/0", "/l/2/r"},
		},
		{
			name:      "a shorter list in the original",
			orig:      `{"l":[1]}`,
			canonical: `{"l":[1,2]}`,
			out:       `{"l":[1,3]}`,
			want:      `{"l":[1,3]}`,
			paths:     []string{"/l"},
		},
		{
			name:      "escaped keys",
			orig:      `{"metadata":{"annotations":{"a/b":"1","x~y":"2"}}}`,
			canonical: `{"metadata":{"annotations":{"a/b":"1","x~y":"2"}}}`,
			out:       `{"metadata":{"annotations":{"a/b":"3","c/d":"4"}}}`,
			want:      `{"metadata":{"annotations":{"a/b":"3","c/d":"4"}}}`,
			paths:     []string{"/metadata/annotations/a~1b", "/metadata/annotations/c~1d", "/metadata/annotations/x~0y"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			orig := decodeJSON(t, tc.orig)
			before := engine.DeepCopyMap(orig)
			canon, out := decodeJSON(t, tc.canonical), decodeJSON(t, tc.out)
			w := engine.NewWriter()
			got, err := applyChanges(orig, out, engine.Diff(canon, out), w)
			if err != nil {
				t.Fatal(err)
			}
			if !engine.Equal(orig, before) {
				t.Fatalf("the input was modified: %s", mustJSON(t, orig))
			}
			if want := decodeJSON(t, tc.want); !engine.Equal(got, want) {
				t.Fatalf("got %s, want %s (patch %s)", mustJSON(t, got), tc.want, mustJSON(t, engine.Diff(canon, out)))
			}
			if !slices.Equal(w.Paths(), tc.paths) {
				t.Fatalf("changed paths %q, want %q", w.Paths(), tc.paths)
			}
		})
	}
}

func TestCanonical(t *testing.T) {
	cases := []struct {
		name string
		in   string
		want string
	}{
		{
			name: "pod",
			in:   `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","unknown":1},"spec":{"containers":[{"name":"c","ports":[{"containerPort":80}],"resources":{"limits":{"cpu":"0.5","memory":"0.5Gi"}}}]}}`,
			want: `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},"spec":{"containers":[{"name":"c","ports":[{"containerPort":80}],"resources":{"limits":{"cpu":"500m","memory":"512Mi"}}}]},"status":{}}`,
		},
		{
			name: "deployment template",
			in:   `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"d"},"spec":{"replicas":2,"selector":{"matchLabels":{"a":"b"}},"template":{"metadata":{"labels":{"a":"b"}},"spec":{"containers":[{"name":"c","resources":{"requests":{"cpu":"1.5"}}}]}}}}`,
			want: `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"d"},"spec":{"replicas":2,"selector":{"matchLabels":{"a":"b"}},"strategy":{},"template":{"metadata":{"labels":{"a":"b"}},"spec":{"containers":[{"name":"c","resources":{"requests":{"cpu":"1500m"}}}]}}},"status":{}}`,
		},
		{
			name: "custom resource as given",
			in:   `{"apiVersion":"example.com/v1","kind":"Widget","spec":{"cpu":"0.5"}}`,
			want: `{"apiVersion":"example.com/v1","kind":"Widget","spec":{"cpu":"0.5"}}`,
		},
		{
			name: "does not fit its type: as given",
			in:   `{"apiVersion":"v1","kind":"Pod","spec":{"containers":"nginx"}}`,
			want: `{"apiVersion":"v1","kind":"Pod","spec":{"containers":"nginx"}}`,
		},
		{
			name: "fraction for an integer: as given",
			in:   `{"apiVersion":"v1","kind":"Pod","spec":{"containers":[{"name":"c","ports":[{"containerPort":80.5}]}]}}`,
			want: `{"apiVersion":"v1","kind":"Pod","spec":{"containers":[{"name":"c","ports":[{"containerPort":80.5}]}]}}`,
		},
		{
			name: "no apiVersion: the request's kind, and none added",
			in:   `{"metadata":{"name":"c"},"data":{"a":"b"},"extra":true}`,
			want: `{"metadata":{"name":"c"},"data":{"a":"b"}}`,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := decodeJSON(t, tc.in)
			before := engine.DeepCopyMap(in)
			got := canonical(in, schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"})
			if !engine.Equal(in, before) {
				t.Fatalf("the input was modified")
			}
			if want := decodeJSON(t, tc.want); !engine.Equal(got, want) {
				t.Fatalf("got %s, want %s", mustJSON(t, got), tc.want)
			}
		})
	}
	if canonical(nil, podGVK) != nil {
		t.Fatal("canonical(nil) is not nil")
	}
}

// TestQuantityCanonical reproduces the differential case quantity-canonical offline: the
// policy reads the quantities in the API server's canonical form, and the object keeps
// the form it was written in where the policy changed nothing.
func TestQuantityCanonical(t *testing.T) {
	src := `apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata:
  name: quantity
spec:
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: ["v1"]
      operations: ["CREATE"]
      resources: ["pods"]
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: >
        Object{metadata: Object.metadata{annotations: {
          "example.com/cpu-limit": string(object.spec.containers[0].resources.limits.cpu),
          "example.com/memory-limit": string(object.spec.containers[0].resources.limits.memory),
          "example.com/unknown-field": string(has(object.spec.unknownField))
        }}}
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicyBinding
metadata:
  name: quantity
spec:
  policyName: quantity
`
	pod := decodeJSON(t, `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web","namespace":"default"},
		"spec":{"unknownField":"kept","containers":[{"name":"nginx","image":"nginx:1.25","resources":{"limits":{"cpu":"0.5","memory":"0.5Gi"}}}]}}`)
	before := engine.DeepCopyMap(pod)
	res, err := mutateOnce(t, New(Options{}), src, pod)
	if err != nil {
		t.Fatal(err)
	}
	if !engine.Equal(pod, before) {
		t.Fatal("the input was modified in place")
	}
	want := decodeJSON(t, `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web","namespace":"default",
		"annotations":{"example.com/cpu-limit":"500m","example.com/memory-limit":"512Mi","example.com/unknown-field":"false"}},
		"spec":{"unknownField":"kept","containers":[{"name":"nginx","image":"nginx:1.25","resources":{"limits":{"cpu":"0.5","memory":"0.5Gi"}}}]}}`)
	if !engine.Equal(res.Object, want) {
		t.Fatalf("got %s", mustJSON(t, res.Object))
	}
	var paths []string
	for _, c := range res.Trace {
		paths = append(paths, c.Paths...)
	}
	if !slices.Equal(paths, []string{"/metadata/annotations"}) {
		t.Fatalf("trace paths %q, want only the annotations", paths)
	}
}

// TestCanonicalWrites checks what a policy writes where the canonical form and the object
// differ: resources under a container that had none, a value the policy copies from a
// quantity, and the pod template of a Deployment (autogen).
func TestCanonicalWrites(t *testing.T) {
	kyverno := func(autogen, mutation string) string {
		return `apiVersion: policies.kyverno.io/v1alpha1
kind: MutatingPolicy
metadata:
  name: p
spec:
` + autogen + `  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: ["v1"]
      resources: ["pods"]
      operations: ["CREATE"]
  mutations:
` + mutation
	}
	cases := []struct {
		name, policy string
		obj          string
		kind         schema.GroupVersionKind
		want         string
		paths        []string
	}{
		{
			name: "json patch below resources the pod lacks",
			policy: kyverno("", `  - patchType: JSONPatch
    jsonPatch:
      expression: '[JSONPatch{op: "add", path: "/spec/containers/0/resources/limits", value: {"cpu": "0.25"}}]'
`),
			obj:   `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web","namespace":"default"},"spec":{"containers":[{"name":"c","image":"i"}]}}`,
			kind:  podGVK,
			want:  `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web","namespace":"default"},"spec":{"containers":[{"name":"c","image":"i","resources":{"limits":{"cpu":"0.25"}}}]}}`,
			paths: []string{"/spec/containers/0/resources"},
		},
		{
			name: "apply configuration copies a canonical quantity",
			policy: kyverno("", `  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: >
        Object{spec: Object.spec{containers: object.spec.containers.map(c, Object.spec.containers{
          name: c.name, resources: Object.spec.containers.resources{requests: {"memory": c.resources.limits.memory}}})}}
`),
			obj:   `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web","namespace":"default"},"spec":{"containers":[{"name":"c","image":"i","resources":{"limits":{"memory":"0.5Gi"}}}]}}`,
			kind:  podGVK,
			want:  `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web","namespace":"default"},"spec":{"containers":[{"name":"c","image":"i","resources":{"limits":{"memory":"0.5Gi"},"requests":{"memory":"512Mi"}}}]}}`,
			paths: []string{"/spec/containers/0/resources/requests"},
		},
		{
			name: "autogen template of a deployment",
			policy: kyverno(`  autogen:
    podControllers:
      controllers: [deployments]
`, `  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: 'Object{spec: Object.spec{priorityClassName: string(object.spec.containers[0].resources.limits.cpu)}}'
`),
			obj: `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web","namespace":"default"},"spec":{"selector":{"matchLabels":{"a":"b"}},
				"template":{"metadata":{"labels":{"a":"b"}},"spec":{"containers":[{"name":"c","image":"i","resources":{"limits":{"cpu":"1.5"}}}]}}}}`,
			kind: schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"},
			want: `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web","namespace":"default"},"spec":{"selector":{"matchLabels":{"a":"b"}},
				"template":{"metadata":{"labels":{"a":"b"}},"spec":{"priorityClassName":"1500m","containers":[{"name":"c","image":"i","resources":{"limits":{"cpu":"1.5"}}}]}}}}`,
			paths: []string{"/spec/template/spec/priorityClassName"},
		},
		{
			name: "an object that does not fit its type is seen as given",
			policy: kyverno("", `  - patchType: JSONPatch
    jsonPatch:
      expression: '[JSONPatch{op: "add", path: "/metadata/labels", value: {"port": string(object.spec.containers[0].ports[0].containerPort)}}]'
`),
			obj:   `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web","namespace":"default"},"spec":{"containers":[{"name":"c","ports":[{"containerPort":80.5}]}]}}`,
			kind:  podGVK,
			want:  `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web","namespace":"default","labels":{"port":"80.5"}},"spec":{"containers":[{"name":"c","ports":[{"containerPort":80.5}]}]}}`,
			paths: []string{"/metadata/labels"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			obj := decodeJSON(t, tc.obj)
			before := engine.DeepCopyMap(obj)
			res := mutateKind(t, tc.policy, obj, tc.kind)
			if !engine.Equal(obj, before) {
				t.Fatal("the input was modified in place")
			}
			if want := decodeJSON(t, tc.want); !engine.Equal(res.Object, want) {
				t.Fatalf("got %s\nwant %s", mustJSON(t, res.Object), mustJSON(t, want))
			}
			var paths []string
			for _, c := range res.Trace {
				paths = append(paths, c.Paths...)
			}
			if !slices.Equal(paths, tc.paths) {
				t.Fatalf("trace paths %q, want %q", paths, tc.paths)
			}
		})
	}
}

func mutateKind(t *testing.T, src string, obj map[string]any, kind schema.GroupVersionKind) *engine.Result {
	t.Helper()
	set := compileSet(t, src)
	res, err := set.Mutate(context.Background(), &engine.Request{
		Kind: kind, Operation: engine.Create, Namespace: "default", Name: "web", Object: obj,
	})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// compileSet compiles the policies of src with default options into an engine set.
func compileSet(t testing.TB, src string) *engine.Set {
	t.Helper()
	docs, err := policy.Decode("policy.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(Options{}).Compile(docs)
	if err != nil {
		t.Fatal(err)
	}
	set, err := engine.NewSet(b.Mutators)
	if err != nil {
		t.Fatal(err)
	}
	return set
}
