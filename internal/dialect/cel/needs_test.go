package cel

import (
	"fmt"
	"slices"
	"testing"

	"github.com/morph-dev/morph/internal/objects"
	"github.com/morph-dev/morph/internal/policy"
)

// TestNeeds: a policy says what it reads from the cluster (engine.Descriptor.Needs).
func TestNeeds(t *testing.T) {
	ns, crds := objects.NamespaceResource.String(), objects.CRDResource.String()
	for _, tc := range []struct {
		name, selector, group, resource, expression string
		exception                                   string
		want                                        []string
	}{
		{"pods", "", "", "pods", `Object{metadata: Object.metadata{labels: {"a": "b"}}}`, "", nil},
		{"namespaceSelector", "{matchLabels: {team: a}}", "", "pods", `Object{metadata: Object.metadata{labels: {"a": "b"}}}`, "", []string{ns}},
		{"namespaceObject", "", "", "pods", `Object{metadata: Object.metadata{labels: {"team": namespaceObject.metadata.name}}}`, "", []string{ns}},
		{"a custom resource", "", "example.com", "widgets", `Object{metadata: Object.metadata{labels: {"a": "b"}}}`, "", []string{crds}},
		{"an exception reading namespaceObject", "", "", "pods", `Object{metadata: Object.metadata{labels: {"a": "b"}}}`, `
---
apiVersion: policies.kyverno.io/v1
kind: PolicyException
metadata: {name: e, namespace: kyverno}
spec:
  policyRefs: [{name: p, kind: MutatingPolicy}]
  matchConditions:
  - {name: team, expression: 'namespaceObject.metadata.name == "team-a"'}
`, []string{ns}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			selector := ""
			if tc.selector != "" {
				selector = "\n    namespaceSelector: " + tc.selector
			}
			text := fmt.Sprintf(`apiVersion: policies.kyverno.io/v1
kind: MutatingPolicy
metadata: {name: p}
spec:
  matchConstraints:%s
    resourceRules:
    - {apiGroups: [%q], apiVersions: [v1], resources: [%s], operations: [CREATE]}
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: '%s'
`, selector, tc.group, tc.resource, tc.expression) + tc.exception
			docs, err := policy.Decode("policies/test.yaml", []byte(text))
			if err != nil {
				t.Fatal(err)
			}
			b, err := New(Options{}).Compile(docs)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, n := range b.Mutators[0].Needs {
				got = append(got, n.String())
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("Needs %v, want %v", got, tc.want)
			}
		})
	}
}
