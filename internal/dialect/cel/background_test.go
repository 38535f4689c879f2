package cel

import (
	"context"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/morph-dev/morph/internal/engine"
	"github.com/morph-dev/morph/internal/objects"
	"github.com/morph-dev/morph/internal/offline"
	"github.com/morph-dev/morph/internal/policy"
	"github.com/morph-dev/morph/internal/request"
)

// bgPolicy is a MutatingPolicy with mutateExisting whose trigger is the ConfigMap
// "trigger" (any namespace); TARGET is replaced by the case's target fields, KIND,
// NS and MATCHOPS by the policy kind, namespace and trigger operations.
const bgPolicy = `apiVersion: policies.kyverno.io/v1alpha1
kind: KIND
metadata:
  name: bg
  namespace: NS
spec:
  evaluation:
    mutateExisting:
      enabled: true
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: ["v1"]
      operations: MATCHOPS
      resources: ["configmaps"]
      resourceNames: ["trigger"]
TARGET
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: >
        Object{metadata: Object.metadata{annotations: {
          "request-name": request.name,
          "request-operation": request.operation,
          "request-object": request.object == null ? "null" : string(request.object.metadata.name),
          "request-old-object": request.oldObject == null ? "null" : string(request.oldObject.data.v),
          "object": string(object.metadata.name),
          "old-object-null": string(oldObject == null),
          "namespace-object-null": string(namespaceObject == null)
        }}}
`

const targetConfigMaps = `  targetMatchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: ["v1"]
      operations: ["CREATE", "UPDATE", "DELETE"]
      resources: ["configmaps"]`

func configMap(ns, name string, labels map[string]any) map[string]any {
	md := map[string]any{"name": name, "namespace": ns}
	if labels != nil {
		md["labels"] = labels
	}
	return map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": md, "data": map[string]any{"v": name}}
}

// bgStore holds the existing objects of the background tests: Namespaces prod
// (env=prod) and dev, ConfigMaps prod/a (app=x), prod/b, dev/c (app=x), and a Secret.
func bgStore(t *testing.T) *objects.Store {
	t.Helper()
	s := objects.NewStore()
	for _, o := range []map[string]any{
		{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": "prod", "labels": map[string]any{"env": "prod", "kubernetes.io/metadata.name": "prod"}}},
		{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": "dev", "labels": map[string]any{"kubernetes.io/metadata.name": "dev"}}},
		configMap("prod", "a", map[string]any{"app": "x"}),
		configMap("prod", "b", nil),
		configMap("dev", "c", map[string]any{"app": "x"}),
		{"apiVersion": "v1", "kind": "Secret", "metadata": map[string]any{"name": "s", "namespace": "prod"}},
	} {
		if err := s.Add(o); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

type bgCase struct {
	kind, ns, matchOps, target string
}

func (c bgCase) policyYAML() string {
	kind, ops := c.kind, c.matchOps
	if kind == "" {
		kind = "MutatingPolicy"
	}
	if ops == "" {
		ops = `["CREATE", "UPDATE", "DELETE"]`
	}
	return strings.NewReplacer("KIND", kind, "NS", c.ns, "MATCHOPS", ops, "TARGET", c.target).Replace(bgPolicy)
}

func loadBackground(t *testing.T, store *objects.Store, src string) (request.Policies, engine.ID) {
	t.Helper()
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
	return request.Policies{Set: set}, b.Mutators[0].ID
}

var configMapGVK = schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}

func triggerRequest(op engine.Operation, ns string) *engine.Request {
	req := &engine.Request{
		Kind: configMapGVK, Resource: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"},
		Operation: op, Namespace: ns, Name: "trigger", Source: engine.SourceOriginal,
		Object: configMap(ns, "trigger", nil), NamespaceObject: request.Namespace(ns),
	}
	switch op {
	case engine.Update:
		req.OldObject = configMap(ns, "trigger", nil)
		req.OldObject["data"] = map[string]any{"v": "old"}
	case engine.Delete:
		req.OldObject, req.Object = req.Object, nil
	}
	return req
}

func workTargets(ws []request.Work) string {
	var out []string
	for _, w := range ws {
		s := w.Target.Namespace + "/" + w.Target.Name
		if w.Target.SubResource != "" {
			s += "[" + w.Target.Resource.Resource + "/" + w.Target.SubResource + "]"
		}
		out = append(out, s)
	}
	return strings.Join(out, " ")
}

// TestBackgroundTargets checks which existing objects a trigger (or the policy's
// creation scan) selects: resource rules (else matchConstraints), namespaceSelector on
// the real Namespace, objectSelector, resourceNames, excluded rules, the trigger's
// operation, a NamespacedMutatingPolicy's namespace, expressions with resource.List and
// resource.Get, and the subresource route.
func TestBackgroundTargets(t *testing.T) {
	rules := func(extra string) string { return targetConfigMaps + extra }
	tests := []struct {
		name    string
		policy  bgCase
		op      engine.Operation // "" is the scan
		ns      string           // the trigger's namespace
		want    string
		wantErr string
	}{
		{name: "resource rules", policy: bgCase{target: rules("")}, op: engine.Create, ns: "dev", want: "prod/a prod/b dev/c"},
		{name: "scan", policy: bgCase{target: rules("")}, want: "prod/a prod/b dev/c"},
		// Without target rules, matchConstraints select: its resourceNames name only the
		// trigger, which the store does not hold.
		{name: "matchConstraints when no target rules", policy: bgCase{}, op: engine.Create, ns: "dev", want: ""},
		{name: "namespaceSelector", policy: bgCase{target: rules("\n    namespaceSelector:\n      matchLabels: {env: prod}")}, op: engine.Update, ns: "dev", want: "prod/a prod/b"},
		{name: "objectSelector", policy: bgCase{target: rules("\n    objectSelector:\n      matchLabels: {app: x}")}, op: engine.Create, ns: "dev", want: "prod/a dev/c"},
		{name: "resourceNames", policy: bgCase{target: rules("\n      resourceNames: [b, c]")}, op: engine.Create, ns: "dev", want: "prod/b dev/c"},
		{name: "excludeResourceRules", policy: bgCase{target: rules("\n    excludeResourceRules:\n    - apiGroups: [\"\"]\n      apiVersions: [\"v1\"]\n      operations: [\"*\"]\n      resources: [\"configmaps\"]\n      resourceNames: [a]")}, op: engine.Create, ns: "dev", want: "prod/b dev/c"},
		{name: "target rules without the trigger's operation", policy: bgCase{target: strings.Replace(targetConfigMaps, `["CREATE", "UPDATE", "DELETE"]`, `["CREATE"]`, 1)}, op: engine.Delete, ns: "dev", want: ""},
		{name: "trigger not matched", policy: bgCase{matchOps: `["CREATE"]`, target: rules("")}, op: engine.Update, ns: "dev", want: ""},
		{name: "namespaced policy", policy: bgCase{kind: "NamespacedMutatingPolicy", ns: "dev", target: rules("")}, op: engine.Create, ns: "dev", want: "dev/c"},
		{name: "namespaced policy, trigger elsewhere", policy: bgCase{kind: "NamespacedMutatingPolicy", ns: "dev", target: rules("")}, op: engine.Create, ns: "prod", want: ""},
		{name: "subresource route", policy: bgCase{target: strings.Replace(targetConfigMaps, `["configmaps"]`, `["configmaps/status"]`, 1)}, op: engine.Create, ns: "dev", want: "prod/a[configmaps/status] prod/b[configmaps/status] dev/c[configmaps/status]"},
		{name: "expression list", policy: bgCase{target: rules("\n    expression: resource.List(\"v1\", \"configmaps\", \"prod\")")}, op: engine.Create, ns: "dev", want: "prod/a prod/b"},
		{name: "expression in the trigger's namespace", policy: bgCase{target: rules("\n    expression: resource.List(\"v1\", \"configmaps\", object.metadata.namespace)")}, op: engine.Create, ns: "dev", want: "dev/c"},
		{name: "expression on a deleted trigger", policy: bgCase{target: rules("\n    expression: resource.List(\"v1\", \"configmaps\", object.metadata.namespace)")}, op: engine.Delete, ns: "prod", want: "prod/a prod/b"},
		{name: "expression get", policy: bgCase{target: rules("\n    expression: resource.Get(\"v1\", \"configmaps\", \"dev\", \"c\")")}, op: engine.Create, ns: "dev", want: "dev/c"},
		{name: "expression result filtered by the target rules", policy: bgCase{target: rules("\n    objectSelector:\n      matchLabels: {app: x}\n    expression: resource.List(\"v1\", \"configmaps\", \"prod\")")}, op: engine.Create, ns: "dev", want: "prod/a"},
		{name: "expression of another resource than the target rules", policy: bgCase{target: rules("\n    expression: resource.List(\"v1\", \"secrets\", \"prod\")")}, op: engine.Create, ns: "dev", want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := bgStore(t)
			p, id := loadBackground(t, store, tt.policy.policyYAML())
			objs := offline.StoreObjects{Store: store}
			var ws []request.Work
			var err error
			if tt.op == "" {
				ws, err = request.Scan(context.Background(), p, id, objs)
			} else {
				ws, err = request.Triggered(context.Background(), p, triggerRequest(tt.op, tt.ns), objs)
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := workTargets(ws); got != tt.want {
				t.Errorf("targets %q, want %q", got, tt.want)
			}
		})
	}
}

// TestBackgroundEvaluation checks what a target sees: object the target, oldObject and
// namespaceObject null, request the trigger's admission request (request.object the
// trigger, null on DELETE; request.oldObject the stored trigger), for each kind of
// trigger; targetMatchConditions on the target only; and that a target already in the
// wanted state is not written again.
func TestBackgroundEvaluation(t *testing.T) {
	conditions := targetConfigMaps + "\n  targetMatchConditions:\n  - name: not-b\n    expression: object.metadata.name != \"b\"\n  matchConditions:\n  - name: trigger-only\n    expression: '(request.operation == \"DELETE\" ? oldObject : object).metadata.name == \"trigger\"'"
	tests := []struct {
		op   engine.Operation // "" is the scan
		want map[string]any   // prod/a's annotations
	}{
		{engine.Create, map[string]any{"request-name": "trigger", "request-operation": "CREATE", "request-object": "trigger", "request-old-object": "null", "object": "a", "old-object-null": "true", "namespace-object-null": "true"}},
		{engine.Update, map[string]any{"request-name": "trigger", "request-operation": "UPDATE", "request-object": "trigger", "request-old-object": "old", "object": "a", "old-object-null": "true", "namespace-object-null": "true"}},
		{engine.Delete, map[string]any{"request-name": "trigger", "request-operation": "DELETE", "request-object": "null", "request-old-object": "trigger", "object": "a", "old-object-null": "true", "namespace-object-null": "true"}},
		// A scan's request is an UPDATE of the target itself (Kyverno's processor).
		{"", map[string]any{"request-name": "a", "request-operation": "UPDATE", "request-object": "a", "request-old-object": "null", "object": "a", "old-object-null": "true", "namespace-object-null": "true"}},
	}
	for _, tt := range tests {
		name := string(tt.op)
		if name == "" {
			name = "scan"
		}
		t.Run(name, func(t *testing.T) {
			store := bgStore(t)
			p, id := loadBackground(t, store, bgCase{target: conditions}.policyYAML())
			objs := offline.StoreObjects{Store: store}
			ctx := context.Background()
			var ws []request.Work
			var err error
			if tt.op == "" {
				ws, err = request.Scan(ctx, p, id, objs)
			} else {
				ws, err = request.Triggered(ctx, p, triggerRequest(tt.op, "dev"), objs)
			}
			if err != nil {
				t.Fatal(err)
			}
			changed := map[string]bool{}
			for _, w := range ws {
				target, err := objs.Get(ctx, w.Target.Resource, w.Target.Namespace, w.Target.Name)
				if err != nil {
					t.Fatal(err)
				}
				res, err := request.Background(ctx, p, w, target)
				if err != nil {
					t.Fatal(err)
				}
				key := w.Target.Namespace + "/" + w.Target.Name
				changed[key] = res.Changed()
				if key == "prod/a" {
					got := res.Object["metadata"].(map[string]any)["annotations"]
					if !engine.Equal(got, tt.want) {
						t.Errorf("annotations %v, want %v", got, tt.want)
					}
					// No change, no write: the mutated target evaluated again.
					again, err := request.Background(ctx, p, w, res.Object)
					if err != nil || again.Changed() {
						t.Errorf("second evaluation: changed %v, %v; want no patch", again != nil && again.Changed(), err)
					}
				}
			}
			if !changed["prod/a"] || changed["prod/b"] || !changed["dev/c"] {
				t.Errorf("changed %v: want prod/a and dev/c, not prod/b (targetMatchConditions)", changed)
			}
		})
	}
}

// TestBackgroundAdmission checks that a policy with target rules or a target expression
// does not mutate its trigger at admission (Kyverno's NoTargetMatchConstraintPolicy),
// while one selecting its targets with matchConstraints does; and that a
// MutatingAdmissionPolicy has no background.
func TestBackgroundAdmission(t *testing.T) {
	for _, tt := range []struct {
		name   string
		target string
		want   bool
	}{
		{"matchConstraints", "", true},
		{"target rules", targetConfigMaps, false},
		{"target expression", targetConfigMaps + "\n    expression: resource.List(\"v1\", \"configmaps\", \"prod\")", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p, _ := loadBackground(t, bgStore(t), bgCase{target: tt.target}.policyYAML())
			res, err := p.Set.Mutate(context.Background(), triggerRequest(engine.Create, "dev"))
			if err != nil {
				t.Fatal(err)
			}
			if res.Changed() != tt.want {
				t.Errorf("trigger mutated at admission: %v, want %v", res.Changed(), tt.want)
			}
		})
	}
	const mapDoc = `apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata: {name: m}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: ["v1"], operations: ["CREATE"], resources: ["configmaps"]}
  mutations:
  - patchType: JSONPatch
    jsonPatch: {expression: '[JSONPatch{op: "add", path: "/metadata/labels", value: {"a": "b"}}]'}
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicyBinding
metadata: {name: mb}
spec: {policyName: m}
`
	docs, err := policy.Decode("map.yaml", []byte(mapDoc))
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(Options{}).Compile(docs)
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Mutators) != 1 || b.Mutators[0].Background != nil {
		t.Errorf("a MutatingAdmissionPolicy mutates no existing object: %+v", b.Mutators)
	}
}

// TestBackgroundResources lists what the background reads and writes.
func TestBackgroundResources(t *testing.T) {
	src := bgCase{target: strings.Replace(targetConfigMaps, `["configmaps"]`, `["configmaps/status"]`, 1) + "\n    expression: resource.List(\"v1\", \"configmaps\", \"prod\")"}.policyYAML()
	p, _ := loadBackground(t, bgStore(t), src)
	var got []string
	for _, r := range request.BackgroundResources(p) {
		got = append(got, r.Kind.Kind+" "+r.Resource.String()+" "+r.SubResource)
	}
	want := "ConfigMap /v1, Resource=configmaps status|ConfigMap /v1, Resource=configmaps "
	if strings.Join(got, "|") != want {
		t.Errorf("resources %q, want %q", strings.Join(got, "|"), want)
	}
}

// TestSkipBackgroundRequests reads evaluation.skipBackgroundRequests (default true).
func TestSkipBackgroundRequests(t *testing.T) {
	for _, tt := range []struct {
		set  string
		want bool
	}{{"", true}, {"    skipBackgroundRequests: false\n", false}, {"    skipBackgroundRequests: true\n", true}} {
		src := strings.Replace(bgCase{}.policyYAML(), "  evaluation:\n", "  evaluation:\n"+tt.set, 1)
		p, _ := loadBackground(t, bgStore(t), src)
		if got := p.Set.Mutators()[0].Background.SkipBackgroundRequests; got != tt.want {
			t.Errorf("%q: SkipBackgroundRequests %v, want %v", tt.set, got, tt.want)
		}
	}
}
