package cel

import (
	"strings"
	"testing"
)

// TestRewriteForController checks the rewriting against the cases of Kyverno 1.19's own
// mpol autogen tests (pkg/cel/policies/mpol/autogen/autogen_test.go), whitespace
// ignored.
func TestRewriteForController(t *testing.T) {
	tests := []struct{ set, in, want string }{
		{rewriteDefaults,
			`Object{spec: Object.spec{containers: object.spec.containers.map(container, Object.spec.containers{name: container.name, securityContext: Object.spec.containers.securityContext{allowPrivilegeEscalation: false}})}}`,
			`Object{spec: Object.spec{template: Object.spec.template{spec: Object.spec.template.spec{containers: object.spec.template.spec.containers.map(container, Object.spec.template.spec.containers{name: container.name, securityContext: Object.spec.template.spec.containers.securityContext{allowPrivilegeEscalation: false}})}}}}`},
		{rewriteCronJobs,
			`Object{spec: Object.spec{containers: object.spec.containers.map(container, Object.spec.containers{name: container.name})}}`,
			`Object{spec: Object.spec{jobTemplate: Object.spec.jobTemplate{spec: Object.spec.jobTemplate.spec{template: Object.spec.jobTemplate.spec.template{spec: Object.spec.jobTemplate.spec.template.spec{containers: object.spec.jobTemplate.spec.template.spec.containers.map(container, Object.spec.jobTemplate.spec.template.spec.containers{name: container.name})}}}}}}`},
		{rewriteDefaults, `'istio.io/dataplane-mode' in namespaceObject.metadata.labels`, `'istio.io/dataplane-mode' in namespaceObject.metadata.labels`},
		{rewriteDefaults, `namespaceObject.spec.containers`, `namespaceObject.spec.containers`},
		{rewriteCronJobs, `'team' in namespaceObject.metadata.annotations`, `'team' in namespaceObject.metadata.annotations`},
		{rewriteDefaults, `oldObject.spec.containers`, `oldObject.spec.template.spec.containers`},
		{rewriteDefaults, `has(object.metadata.labels) && object.metadata.labels.app == "x"`, `has(object.spec.template.metadata.labels) && object.spec.template.metadata.labels.app == "x"`},
		{rewriteCronJobs, `object.metadata.annotations["a"] == object.metadata.name`, `object.spec.jobTemplate.spec.template.metadata.annotations["a"] == object.metadata.name`},
		// Object.metadata{...} is not rewritten (only .metadata.labels/.annotations
		// paths are): Kyverno's evaluation then fails on the type name.
		{rewriteDefaults, `Object{metadata: Object.metadata{labels: {"a": "b"}}}`, `Object{spec: Object.spec{template: Object.spec.template{metadata: Object.metadata{labels: {"a": "b"}}}}}`},
		{rewriteDefaults, `[JSONPatch{op: "add", path: "/spec/x", value: object.spec.y}]`, `[JSONPatch{op: "add", path: "/spec/x", value: object.spec.template.spec.y}]`},
	}
	norm := func(s string) string { return strings.Join(strings.Fields(s), "") }
	for _, tt := range tests {
		if got := rewriteForController(tt.in, tt.set); norm(got) != norm(tt.want) {
			t.Errorf("%s: rewriteForController(%q)\n got %s\nwant %s", tt.set, tt.in, got, tt.want)
		}
	}
}
