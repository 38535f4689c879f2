package gatekeeper

import (
	"fmt"
	"slices"
	"testing"

	"github.com/morph-dev/morph/internal/objects"
)

// TestNeeds: a mutator says what it reads from the cluster (engine.Descriptor.Needs).
func TestNeeds(t *testing.T) {
	for _, tc := range []struct {
		name, match string
		kinds       string
		want        []string
	}{
		{"no match", `{}`, `[Pod]`, nil},
		{"names of namespaces on a built-in kind", `{namespaces: [apps], scope: Namespaced}`, `[Pod]`, nil},
		{"namespaceSelector", `{namespaceSelector: {matchLabels: {team: a}}}`, `[Pod]`, []string{objects.NamespaceResource.String()}},
		{"scope of a custom kind", `{scope: Cluster}`, `[Widget]`, []string{objects.CRDResource.String()}},
		{"no namespace criteria on a custom kind", `{}`, `[Widget]`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			text := fmt.Sprintf(`apiVersion: mutations.gatekeeper.sh/v1
kind: Assign
metadata: {name: a}
spec:
  applyTo: [{groups: [""], versions: [v1], kinds: %s}]
  match: %s
  location: spec.x
  parameters: {assign: {value: 1}}
`, tc.kinds, tc.match)
			b, err := compile(t, Options{}, text)
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
