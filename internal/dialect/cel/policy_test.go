package cel

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/morph-dev/morph/internal/engine"
	"github.com/morph-dev/morph/internal/objects"
	"github.com/morph-dev/morph/internal/policy"
)

const labelPolicy = `apiVersion: policies.kyverno.io/v1alpha1
kind: KIND
metadata:
  name: NAME
  namespace: NS
  annotations:
    morph.dev/order: "ORDER"
spec:
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: ["v1"]
      resources: ["pods"]
      operations: ["CREATE"]
  mutations:
  - patchType: JSONPatch
    jsonPatch:
      expression: >
        [JSONPatch{op: "add", path: "/metadata/annotations", value: {"last": "NAME", "seen": has(object.metadata.annotations) ? string(object.metadata.annotations["last"]) : ""}}]
`

func kyvernoDoc(kind, name, ns, order string) string {
	return strings.NewReplacer("KIND", kind, "NAME", name, "NS", ns, "ORDER", order).Replace(labelPolicy)
}

// TestOrder checks that several policies on one object run in the engine's order (the
// morph.dev/order annotation, then kind, namespace, name), never in map order.
func TestOrder(t *testing.T) {
	src := kyvernoDoc("MutatingPolicy", "b", "", "0") + "---\n" + kyvernoDoc("MutatingPolicy", "a", "", "0") + "---\n" +
		kyvernoDoc("MutatingPolicy", "z-first", "", "-1") + "---\n" + kyvernoDoc("NamespacedMutatingPolicy", "c", "default", "0") + "---\n" +
		kyvernoDoc("NamespacedMutatingPolicy", "elsewhere", "other", "0")
	for i := 0; i < 5; i++ {
		res, err := mutateOnce(t, New(Options{}), src, testPod())
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, id := range res.Mutated() {
			names = append(names, id.String())
		}
		want := "MutatingPolicy/z-first MutatingPolicy/a MutatingPolicy/b NamespacedMutatingPolicy/default/c"
		if got := strings.Join(names, " "); got != want {
			t.Fatalf("order = %s, want %s", got, want)
		}
		ann := res.Object["metadata"].(map[string]any)["annotations"].(map[string]any)
		if ann["last"] != "c" || ann["seen"] != "b" {
			t.Fatalf("annotations = %v", ann)
		}
	}
}

func TestLoadErrors(t *testing.T) {
	tests := []struct{ name, doc, want string }{
		{
			name: "timeout out of range",
			doc:  strings.Replace(kyvernoDoc("MutatingPolicy", "p", "", "0"), "spec:\n", "spec:\n  webhookConfiguration:\n    timeoutSeconds: 31\n", 1),
			want: `policy.yaml: document 1 (MutatingPolicy "p"): spec.webhookConfiguration.timeoutSeconds: Invalid value: 31: out of range; use 1 to 30 seconds`,
		},
		{
			name: "bad order",
			doc:  kyvernoDoc("MutatingPolicy", "p", "", "first"),
			want: `metadata.annotations[morph.dev/order]: Invalid value: "first": not a whole number; give one such as "10"`,
		},
		{
			name: "namespaced without namespace",
			doc:  kyvernoDoc("NamespacedMutatingPolicy", "p", "", "0"),
			want: `metadata.namespace: Required value: a NamespacedMutatingPolicy mutates the objects of its namespace; give it`,
		},
		{
			name: "custom controller",
			doc:  strings.Replace(kyvernoDoc("MutatingPolicy", "p", "", "0"), "spec:\n", "spec:\n  autogen:\n    podControllers:\n      controllers: [jobsets.v1alpha2.jobset.x-k8s.io]\n", 1),
			want: `spec.autogen.podControllers.controllers[0]: Invalid value: "jobsets.v1alpha2.jobset.x-k8s.io": custom pod controllers (resource.version.group) are not supported by morph; use`,
		},
		{
			name: "unsupported version",
			doc:  strings.Replace(kyvernoDoc("MutatingPolicy", "p", "", "0"), "v1alpha1", "v2", 1),
			want: `apiVersion: Invalid value: "policies.kyverno.io/v2": version v2 is not supported; use v1, v1beta1 or v1alpha1`,
		},
		{
			name: "unknown field in a MutatingAdmissionPolicy",
			doc:  "apiVersion: admissionregistration.k8s.io/v1\nkind: MutatingAdmissionPolicy\nmetadata:\n  name: m\nspec:\n  mutatons: []\n",
			want: `mutatons: Forbidden: unknown field; remove it or correct its spelling`,
		},
		{
			name: "binding paramRef",
			doc:  "apiVersion: admissionregistration.k8s.io/v1\nkind: MutatingAdmissionPolicyBinding\nmetadata:\n  name: b\nspec:\n  policyName: m\n  paramRef:\n    name: x\n",
			want: `spec.paramRef.parameterNotFoundAction: Required value: use Allow or Deny`,
		},
		{
			name: "exception condition",
			doc:  "apiVersion: policies.kyverno.io/v1alpha1\nkind: PolicyException\nmetadata:\n  name: e\nspec:\n  policyRefs: [{name: p, kind: MutatingPolicy}]\n  matchConditions:\n  - name: c\n    expression: object.metadata.name ==\n",
			want: `spec.matchConditions[0].expression: Invalid value: line 1, column 24: Syntax error`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			docs, err := policy.Decode("policy.yaml", []byte(tt.doc))
			if err != nil {
				t.Fatal(err)
			}
			_, err = New(Options{}).Compile(docs)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestPolicyException(t *testing.T) {
	src := kyvernoDoc("MutatingPolicy", "p", "", "0") + `---
apiVersion: policies.kyverno.io/v1alpha1
kind: PolicyException
metadata:
  name: skip-legacy
  namespace: default
spec:
  policyRefs:
  - name: p
    kind: MutatingPolicy
  matchConditions:
  - name: legacy
    expression: has(object.metadata.labels) && object.metadata.labels["legacy"] == "true"
---
apiVersion: policies.kyverno.io/v1alpha1
kind: PolicyException
metadata:
  name: skip-busybox
  namespace: default
spec:
  policyRefs:
  - name: p
  images: ["busybox*"]
---
apiVersion: policies.kyverno.io/v1alpha1
kind: PolicyException
metadata:
  name: other-policy
  namespace: default
spec:
  policyRefs:
  - name: q
`
	set := compileSet(t, src)
	tests := []struct {
		name    string
		labels  map[string]any
		image   string
		exempt  string
		mutated bool
	}{
		{name: "plain", image: "nginx", mutated: true},
		{name: "legacy label", labels: map[string]any{"legacy": "true"}, image: "nginx", exempt: "skip-legacy"},
		// An exception with images does not exempt (Kyverno 1.19): it fills
		// exceptions.allowedImages, which this policy does not read.
		{name: "busybox image", image: "busybox:1.36", mutated: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := testPod()
			if tt.labels != nil {
				pod["metadata"].(map[string]any)["labels"] = tt.labels
			}
			pod["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)["image"] = tt.image
			res, err := set.Mutate(context.Background(), &engine.Request{Kind: podGVK, Operation: engine.Create, Namespace: "default", Object: pod})
			if err != nil {
				t.Fatal(err)
			}
			if res.Changed() != tt.mutated {
				t.Errorf("changed = %v, want %v", res.Changed(), tt.mutated)
			}
			var ex []engine.Note
			for _, n := range res.Notes {
				if n.Kind == engine.NoteExemption {
					ex = append(ex, n)
				}
			}
			if tt.exempt == "" {
				if len(ex) != 0 {
					t.Errorf("exemptions = %+v, want none", ex)
				}
				return
			}
			if len(ex) == 0 || !strings.HasSuffix(ex[0].Message, "/"+tt.exempt) || ex[0].ID.Name != "p" || !strings.HasPrefix(ex[0].Message, "Pod default/web by ") {
				t.Errorf("exemptions = %+v, want %s", ex, tt.exempt)
			}
		})
	}
}

func TestEvaluationModes(t *testing.T) {
	off := strings.Replace(kyvernoDoc("MutatingPolicy", "disabled", "", "0"), "spec:\n", "spec:\n  evaluation:\n    admission:\n      enabled: false\n", 1)
	existing := strings.Replace(kyvernoDoc("MutatingPolicy", "existing", "", "0"), "spec:\n", "spec:\n  evaluation:\n    mutateExisting:\n      enabled: true\n", 1)
	docs, err := policy.Decode("policy.yaml", []byte(off+"---\n"+existing))
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(Options{}).Compile(docs)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]engine.Mutator{}
	for _, m := range b.Mutators {
		byName[m.ID.Name] = m
	}
	if !byName["disabled"].AdmissionOff || byName["disabled"].Background != nil {
		t.Error("off: admission off, no mutateExisting expected")
	}
	if byName["existing"].AdmissionOff || byName["existing"].Background == nil {
		t.Error("existing: admission and mutateExisting expected")
	}
	set, err := engine.NewSet(b.Mutators)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		background bool
		want       string
	}{{false, "MutatingPolicy/existing"}, {true, "MutatingPolicy/existing"}} {
		res, err := set.Mutate(context.Background(), &engine.Request{Kind: podGVK, Operation: engine.Create, Namespace: "default", Object: testPod(), Background: tc.background})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, id := range res.Mutated() {
			got = append(got, id.String())
		}
		if strings.Join(got, " ") != tc.want {
			t.Errorf("mutated by %v, want %s", got, tc.want)
		}
	}
	// A target is matched under the trigger's operation, as Kyverno's evaluation does:
	// under UPDATE (a scan's) the CREATE-only rules do not match.
	res, err := set.Mutate(context.Background(), &engine.Request{Kind: podGVK, Operation: engine.Update, Namespace: "other", Object: testPod(), Background: true})
	if err != nil || res.Changed() {
		t.Errorf("background UPDATE of an existing Pod under CREATE-only rules: changed %v, %v; want unchanged", res != nil && res.Changed(), err)
	}
}

// TestMatching checks the API server's matching through the engine: scope, operations,
// subresources, binding intersection and namespace selectors with unknown namespaces.
func TestMatching(t *testing.T) {
	const pol = `apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata:
  name: m
spec:
  matchConstraints:
    resourceRules:
    - apiGroups: ["", "example.com"]
      apiVersions: ["v1"]
      resources: ["RES"]
      operations: ["CREATE"]
      scope: SCOPE
    namespaceSelector: NSSEL
  mutations:
  - patchType: JSONPatch
    jsonPatch:
      expression: '[JSONPatch{op: "add", path: "/metadata/labels", value: {"m": "y"}}]'
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicyBinding
metadata:
  name: b
spec:
  policyName: m
  matchResources:
    objectSelector:
      matchLabels:
        bound: "yes"
`
	store := objects.NewStore()
	for _, o := range []map[string]any{
		{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": "default", "labels": map[string]any{"env": "prod"}}},
		{"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": map[string]any{"name": "widgets.example.com"},
			"spec": map[string]any{"group": "example.com", "scope": "Cluster", "names": map[string]any{"plural": "widgets", "kind": "Widget"},
				"versions": []any{map[string]any{"name": "v1", "served": true, "storage": true}, map[string]any{"name": "v2", "served": true}}}},
	} {
		if err := store.Add(o); err != nil {
			t.Fatal(err)
		}
	}
	bound := map[string]any{"bound": "yes"}
	tests := []struct {
		name, res, scope, nssel string
		kind                    string
		version                 string
		namespace, sub          string
		op                      engine.Operation
		labels                  map[string]any
		want                    bool
		wantErr                 string
	}{
		{name: "match", res: "pods", scope: "'*'", nssel: "{}", kind: "Pod", namespace: "default", op: engine.Create, labels: bound, want: true},
		{name: "binding objectSelector", res: "pods", scope: "'*'", nssel: "{}", kind: "Pod", namespace: "default", op: engine.Create, want: false},
		{name: "operation", res: "pods", scope: "'*'", nssel: "{}", kind: "Pod", namespace: "default", op: engine.Update, labels: bound, want: false},
		{name: "subresource not named", res: "pods", scope: "'*'", nssel: "{}", kind: "Pod", namespace: "default", sub: "status", op: engine.Create, labels: bound, want: false},
		{name: "subresource named", res: "pods/status", scope: "'*'", nssel: "{}", kind: "Pod", namespace: "default", sub: "status", op: engine.Create, labels: bound, want: true},
		{name: "cluster scope excludes namespaced", res: "pods", scope: "Cluster", nssel: "{}", kind: "Pod", namespace: "default", op: engine.Create, labels: bound, want: false},
		{name: "namespace selector", res: "pods", scope: "'*'", nssel: "{matchLabels: {env: prod}}", kind: "Pod", namespace: "default", op: engine.Create, labels: bound, want: true},
		{name: "namespace selector no match", res: "pods", scope: "'*'", nssel: "{matchLabels: {env: dev}}", kind: "Pod", namespace: "default", op: engine.Create, labels: bound, want: false},
		{name: "unknown namespace", res: "pods", scope: "'*'", nssel: "{matchLabels: {env: dev}}", kind: "Pod", namespace: "ghost", op: engine.Create, labels: bound, wantErr: `namespace "ghost" is unknown: pass the Namespace with --context`},
		{name: "equivalent CRD version", res: "widgets", scope: "'*'", nssel: "{}", kind: "Widget", version: "v2", op: engine.Create, labels: bound, want: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := strings.NewReplacer("RES", tt.res, "SCOPE", tt.scope, "NSSEL", tt.nssel).Replace(pol)
			docs, err := policy.Decode("policy.yaml", []byte(src))
			if err != nil {
				t.Fatal(err)
			}
			b, err := New(Options{Objects: store}).Compile(docs)
			if err != nil {
				t.Fatal(err)
			}
			set, err := engine.NewSet(b.Mutators)
			if err != nil {
				t.Fatal(err)
			}
			gvk := podGVK
			if tt.kind == "Widget" {
				gvk.Group, gvk.Version, gvk.Kind = "example.com", tt.version, "Widget"
			}
			obj := map[string]any{"apiVersion": gvk.GroupVersion().String(), "kind": gvk.Kind, "metadata": map[string]any{"name": "x", "namespace": tt.namespace}}
			if tt.labels != nil {
				obj["metadata"].(map[string]any)["labels"] = tt.labels
			}
			if tt.namespace == "" {
				delete(obj["metadata"].(map[string]any), "namespace")
			}
			res, err := set.Mutate(context.Background(), &engine.Request{Kind: gvk, Operation: tt.op, Namespace: tt.namespace, SubResource: tt.sub, Object: obj})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if res.Changed() != tt.want {
				t.Errorf("changed = %v, want %v", res.Changed(), tt.want)
			}
			if tt.want && res.Object["apiVersion"] != gvk.GroupVersion().String() {
				t.Errorf("apiVersion = %v, want %v", res.Object["apiVersion"], gvk.GroupVersion())
			}
		})
	}
}

// TestUnknownPodController checks that a name in autogen.podControllers.controllers
// that is no pod controller is ignored, as Kyverno 1.19.1 ignores it (pkg/cel/autogen
// ResolveConfig), with a warning naming the field; the other names still apply.
func TestUnknownPodController(t *testing.T) {
	doc := strings.Replace(kyvernoDoc("MutatingPolicy", "p", "", "0"), "spec:\n", "spec:\n  autogen:\n    podControllers:\n      controllers: [pods, deployments]\n", 1)
	docs, err := policy.Decode("policy.yaml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(Options{}).Compile(docs)
	if err != nil {
		t.Fatal(err)
	}
	want := `policy.yaml: document 1 (MutatingPolicy "p"): spec.autogen.podControllers.controllers[0]: "pods" is not a pod controller and is ignored, as Kyverno ignores it`
	if len(b.Warnings) != 1 || !strings.HasPrefix(b.Warnings[0], want) {
		t.Fatalf("warnings %q, want one starting %q", b.Warnings, want)
	}
	var kinds []string
	for _, tg := range b.Mutators[0].Targets {
		kinds = append(kinds, tg.Kind)
	}
	slices.Sort(kinds)
	if !slices.Equal(kinds, []string{"Deployment", "Pod"}) {
		t.Errorf("target kinds %v, want Deployment and Pod", kinds)
	}
}
