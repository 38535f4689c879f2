package cel

import (
	"strings"
	"testing"

	"github.com/morph-dev/morph/internal/policy"
)

const minimalKyverno = `apiVersion: policies.kyverno.io/v1beta1
kind: MutatingPolicy
metadata:
  name: p
spec:
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: ["v1"]
      resources: ["pods"]
      operations: OPS
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: 'Object{metadata: Object.metadata{labels: {"a": "b"}}}'
EXTRA`

// TestKyvernoFields checks that no field of a Kyverno policy is dropped silently: an
// unknown field and a Kyverno field morph does not implement are errors naming them;
// the fields that only feed Kyverno's reports are accepted.
func TestKyvernoFields(t *testing.T) {
	tests := []struct {
		name, ops, extra, wantErr string
	}{
		{name: "known fields", ops: `["CREATE"]`, extra: "  auditAnnotations:\n  - key: k\n    valueExpression: '\"v\"'\n  evaluation:\n    background:\n      enabled: false\n    mode: Kubernetes\n"},
		{name: "unknown field", ops: `["CREATE"]`, extra: "  mutationz: []\n", wantErr: `mutationz: Forbidden: unknown field; remove it or correct its spelling`},
		{name: "unknown nested field", ops: `["CREATE"]`, extra: "  evaluation:\n    admision:\n      enabled: true\n", wantErr: `admision: Forbidden: unknown field`},
		{name: "targetMatchConditions", ops: `["CREATE"]`, extra: "  targetMatchConditions:\n  - name: x\n    expression: \"true\"\n"},
		{name: "targetMatchConditions not bool", ops: `["CREATE"]`, extra: "  targetMatchConditions:\n  - name: x\n    expression: \"1\"\n", wantErr: "spec.targetMatchConditions[0].expression: Invalid value: output is expected to be of type bool"},
		{name: "targetMatchConstraints.expression", ops: `["CREATE"]`, extra: "  targetMatchConstraints:\n    expression: 'resource.List(\"v1\", \"configmaps\", \"\")'\n    resourceRules:\n    - apiGroups: [\"\"]\n      apiVersions: [\"v1\"]\n      resources: [\"pods\"]\n      operations: [\"*\"]\n"},
		{name: "targetMatchConstraints.expression not a map", ops: `["CREATE"]`, extra: "  targetMatchConstraints:\n    expression: '[1]'\n", wantErr: "spec.targetMatchConstraints.expression: Invalid value: output is expected to be of type map"},
		{name: "targetMatchConstraints without rules or expression", ops: `["CREATE"]`, extra: "  targetMatchConstraints:\n    objectSelector: {}\n", wantErr: "spec.targetMatchConstraints.resourceRules: Required value"},
		{name: "useServerSideApply", ops: `["CREATE"]`, extra: "  evaluation:\n    useServerSideApply: true\n", wantErr: "spec.evaluation.useServerSideApply: Forbidden: morph does not implement useServerSideApply"},
		{name: "JSON mode", ops: `["CREATE"]`, extra: "  evaluation:\n    mode: JSON\n", wantErr: `spec.evaluation.mode: Invalid value: "JSON": morph evaluates Kubernetes objects only; use mode Kubernetes`},
		{name: "audit annotation error", ops: `["CREATE"]`, extra: "  auditAnnotations:\n  - key: k\n    valueExpression: '1'\n", wantErr: "spec.auditAnnotations[0].valueExpression: Invalid value: output is expected to be of type string or null"},
		{name: "DELETE accepted", ops: `["CREATE", "DELETE"]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := strings.NewReplacer("OPS", tt.ops, "EXTRA", tt.extra).Replace(minimalKyverno)
			docs, err := policy.Decode("policy.yaml", []byte(src))
			if err != nil {
				t.Fatal(err)
			}
			_, err = New(Options{}).Compile(docs)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("error %v, want none", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

// TestDeleteStaysAnErrorForMAP: DELETE is accepted in a Kyverno policy only.
func TestDeleteStaysAnErrorForMAP(t *testing.T) {
	src := `apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata:
  name: m
spec:
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: ["v1"]
      resources: ["pods"]
      operations: ["DELETE"]
  mutations:
  - patchType: JSONPatch
    jsonPatch:
      expression: '[]'
`
	docs, err := policy.Decode("policy.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(Options{}).Compile(docs); err == nil || !strings.Contains(err.Error(), "DELETE cannot be mutated") {
		t.Fatalf("error %v, want DELETE cannot be mutated", err)
	}
}

// TestParamRefDefaults: a v1alpha1 binding defaults parameterNotFoundAction to Deny
// (SetDefaults_ParamRef); v1beta1 and v1 require it.
func TestParamRefDefaults(t *testing.T) {
	for _, tt := range []struct{ version, wantErr string }{
		{"v1alpha1", ""},
		{"v1beta1", "parameterNotFoundAction: Required value: use Allow or Deny"},
		{"v1", "parameterNotFoundAction: Required value: use Allow or Deny"},
	} {
		src := "apiVersion: admissionregistration.k8s.io/" + tt.version + "\nkind: MutatingAdmissionPolicyBinding\nmetadata:\n  name: b\nspec:\n  policyName: m\n  paramRef:\n    name: x\n"
		docs, err := policy.Decode("policy.yaml", []byte(src))
		if err != nil {
			t.Fatal(err)
		}
		bd, errs := decodeBinding(docs[0])
		if tt.wantErr == "" {
			if len(errs) > 0 {
				t.Errorf("%s: %v", tt.version, errs)
			} else if a := bd.Spec.ParamRef.ParameterNotFoundAction; a == nil || *a != "Deny" {
				t.Errorf("%s: parameterNotFoundAction = %v, want Deny", tt.version, a)
			}
			continue
		}
		if len(errs) == 0 || !strings.Contains(errs[0].Error(), tt.wantErr) {
			t.Errorf("%s: errors %v, want %q", tt.version, errs, tt.wantErr)
		}
	}
}
