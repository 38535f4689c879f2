package cel

import (
	"context"
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/morph-dev/morph/internal/engine"
)

// TestInputNeverWritten: a ConfigMap whose data holds a number does not fit its Go
// type, so the policy sees the object as given; a JSON patch whose test operation fails
// makes the API server's patcher return that very object. Nothing may write to it: the
// request's object is shared (copy on write), and a write would race with concurrent
// readers. The float64 below would have been turned into an int64 in place.
func TestInputNeverWritten(t *testing.T) {
	const src = `apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata: {name: test-fails}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: ["v1"], operations: ["CREATE"], resources: ["configmaps"]}
  mutations:
  - patchType: JSONPatch
    jsonPatch:
      expression: >
        [JSONPatch{op: "test", path: "/data/n", value: "not this"},
         JSONPatch{op: "add", path: "/metadata/labels", value: {"a": "b"}}]
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicyBinding
metadata: {name: test-fails}
spec:
  policyName: test-fails
`
	obj := map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "c", "namespace": "default"},
		"data":     map[string]any{"n": float64(2)},
	}
	before := engine.DeepCopyMap(obj)
	set := compileSet(t, src)
	res, err := set.Mutate(context.Background(), &engine.Request{
		Kind: schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, Operation: engine.Create,
		Namespace: "default", Name: "c", Object: obj,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Changed() {
		t.Fatalf("a failed test operation must apply nothing; patch %v", res.Patch)
	}
	if !reflect.DeepEqual(obj, before) {
		t.Fatalf("the request's object was written: %#v, was %#v", obj, before)
	}
}
