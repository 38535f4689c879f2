package cel

import (
	"context"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/morph-dev/morph/internal/engine"
	"github.com/morph-dev/morph/internal/objects"
	"github.com/morph-dev/morph/internal/policy"
)

const cliConventionsPolicies = `apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata: {name: unbound}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: 'Object{metadata: Object.metadata{labels: {"unbound": "applied"}}}'
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata: {name: counted}
spec:
  paramKind: {apiVersion: v1, kind: Secret}
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: 'Object{metadata: Object.metadata{annotations: {"params": has(params.items) ? string(size(params.items)) : params.metadata.name}}}'
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicyBinding
metadata: {name: counted}
spec:
  policyName: counted
  paramRef:
    selector: {matchLabels: {param: "yes"}}
`

// TestKyvernoCLIConventions checks Options.KyvernoCLI against the cluster's conventions:
// an unbound MutatingAdmissionPolicy applies, a binding needs no
// parameterNotFoundAction, and a selector's params come as one list from every
// namespace.
func TestKyvernoCLIConventions(t *testing.T) {
	store := objects.NewStore()
	for _, ns := range []string{"default", "other"} {
		secret := map[string]any{"apiVersion": "v1", "kind": "Secret", "metadata": map[string]any{"name": "s-" + ns, "namespace": ns, "labels": map[string]any{"param": "yes"}}}
		if err := store.Add(secret); err != nil {
			t.Fatal(err)
		}
	}
	docs, err := policy.Decode("policy.yaml", []byte(cliConventionsPolicies))
	if err != nil {
		t.Fatal(err)
	}

	_, err = New(Options{Objects: store}).Compile(docs)
	if err == nil || !strings.Contains(err.Error(), "parameterNotFoundAction") {
		t.Fatalf("in the cluster's conventions a paramRef needs parameterNotFoundAction: %v", err)
	}

	b, err := New(Options{Objects: store, KyvernoCLI: true}).Compile(docs)
	if err != nil {
		t.Fatal(err)
	}
	set, err := engine.NewSet(b.Mutators)
	if err != nil {
		t.Fatal(err)
	}
	cm := map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "cm", "namespace": "default"}}
	res, err := set.Mutate(context.Background(), &engine.Request{
		Kind: schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, Operation: engine.Create,
		Namespace: "default", Name: "cm", Object: cm,
	})
	if err != nil {
		t.Fatal(err)
	}
	md := res.Object["metadata"].(map[string]any)
	if md["labels"].(map[string]any)["unbound"] != "applied" {
		t.Errorf("the unbound policy did not apply: %v", md)
	}
	if md["annotations"].(map[string]any)["params"] != "2" {
		t.Errorf("params: want a list of the 2 selected secrets, got %v", md["annotations"])
	}
	matched, met := map[engine.ID]bool{}, map[engine.ID]bool{}
	for _, n := range res.Notes {
		if n.Kind == engine.NoteMatched {
			matched[n.ID] = true
			if n.Reason == "conditions" {
				met[n.ID] = true
			}
		}
	}
	if len(matched) != 2 || len(met) != 2 {
		t.Errorf("matched notes: matched %v, conditions met %v", matched, met)
	}
}
