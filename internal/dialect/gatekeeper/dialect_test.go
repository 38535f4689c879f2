package gatekeeper

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/morph-dev/morph/internal/engine"
	"github.com/morph-dev/morph/internal/policy"
)

func compile(t *testing.T, opts Options, text string) (*policy.Bundle, error) {
	t.Helper()
	docs, err := policy.Decode("policies/test.yaml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return New(opts).Compile(docs)
}

func obj(t *testing.T, text string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := yaml.Unmarshal([]byte(text), &m); err != nil {
		t.Fatal(err)
	}
	return engine.Normalize(m).(map[string]any)
}

const assignHead = `apiVersion: mutations.gatekeeper.sh/v1
kind: Assign
metadata: {name: a}
spec:
  applyTo: [{groups: [""], versions: [v1], kinds: [Pod]}]
`

func TestHandles(t *testing.T) {
	d := New(Options{})
	for _, tc := range []struct {
		apiVersion, kind string
		want             bool
	}{
		{"mutations.gatekeeper.sh/v1", "Assign", true},
		{"mutations.gatekeeper.sh/v1beta1", "ModifySet", true},
		{"mutations.gatekeeper.sh/v1alpha1", "AssignImage", true},
		{"mutations.gatekeeper.sh/v1", "AssignMetadata", true},
		{"mutations.gatekeeper.sh/v2", "Assign", false},
		{"mutations.gatekeeper.sh/v1", "Other", false},
		{"externaldata.gatekeeper.sh/v1beta1", "Provider", true},
		{"externaldata.gatekeeper.sh/v1alpha1", "ExternalDataProvider", true},
		{"v1", "Pod", false},
	} {
		if got := d.Handles(tc.apiVersion, tc.kind); got != tc.want {
			t.Errorf("Handles(%s, %s) = %v", tc.apiVersion, tc.kind, got)
		}
	}
	if d.Name() != "gatekeeper" {
		t.Errorf("Name() = %q", d.Name())
	}
}

func TestCompileErrors(t *testing.T) {
	tests := []struct {
		name, policy, want string
	}{
		{"location syntax", assignHead + "  location: 'spec.containers[name: x]].image'\n  parameters: {assign: {value: 1}}\n",
			`policies/test.yaml: document 1 (Assign "a"): spec.location: Invalid value: "spec.containers[name: x]].image": unexpected "]" at column 25: expected "." or "["`},
		{"trailing dot", assignHead + "  location: 'spec.'\n  parameters: {assign: {value: 1}}\n", `spec.location: Invalid value: "spec.": the location ends with "."`},
		{"glob at the end", assignHead + "  location: 'spec.containers[name: *]'\n  parameters: {assign: {value: {name: x}}}\n", "ends in the glob"},
		{"key change", assignHead + "  location: 'spec.containers[name: x].name'\n  parameters: {assign: {value: val}}\n", `changes the key field "name"`},
		{"metadata", assignHead + "  location: metadata.labels.x\n  parameters: {assign: {value: val}}\n", "use an AssignMetadata mutator"},
		{"list element value without key", assignHead + "  location: 'spec.containers[name: x]'\n  parameters: {assign: {value: {name: y}}}\n", `spec.parameters.assign.value: Invalid value: the location spec.containers[name: x] ends in a list element; the value must be an object whose "name" is x`},
		{"no applyTo", "apiVersion: mutations.gatekeeper.sh/v1\nkind: Assign\nmetadata: {name: a}\nspec:\n  location: spec.x\n  parameters: {assign: {value: 1}}\n", "spec.applyTo: Required value: list the groups, versions and kinds"},
		{"applyTo typo", "apiVersion: mutations.gatekeeper.sh/v1\nkind: Assign\nmetadata: {name: a}\nspec:\n  applyTo: [{groups: [''], versions: [v1], kindz: [Pod]}]\n  location: spec.x\n  parameters: {assign: {value: 1}}\n", "spec.applyTo[0].kindz: Forbidden: unknown field; the fields here are groups, versions, kinds, kind, operations"},
		{"applyTo glob", "apiVersion: mutations.gatekeeper.sh/v1\nkind: Assign\nmetadata: {name: a}\nspec:\n  applyTo: [{groups: ['*'], versions: [v1], kinds: [Pod]}]\n  location: spec.x\n  parameters: {assign: {value: 1}}\n", `spec.applyTo[0].groups: Invalid value: "*": applyTo does not accept globs; list the exact values`},
		{"applyTo DELETE", "apiVersion: mutations.gatekeeper.sh/v1\nkind: Assign\nmetadata: {name: a}\nspec:\n  applyTo: [{groups: [''], versions: [v1], kinds: [Pod], operations: [DELETE]}]\n  location: spec.x\n  parameters: {assign: {value: 1}}\n", "spec.applyTo[0].operations[0]"},
		{"unknown spec field", assignHead + "  location: spec.x\n  parameter: {assign: {value: 1}}\n", "spec.parameter: Forbidden: unknown field; the fields here are applyTo, match, location, parameters"},
		{"two assign sources", assignHead + "  location: spec.x\n  parameters: {assign: {value: 1, fromMetadata: {field: name}}}\n", "spec.parameters.assign: Invalid value: 2 of value, fromMetadata and externalData are set; give exactly one"},
		{"fromMetadata field", assignHead + "  location: spec.x\n  parameters: {assign: {fromMetadata: {field: uid}}}\n", `spec.parameters.assign.fromMetadata.field: Unsupported value: "uid": supported values: "namespace", "name"`},
		{"pathTests not a prefix", assignHead + "  location: spec.x\n  parameters:\n    assign: {value: 1}\n    pathTests: [{subPath: spec.y, condition: MustExist}]\n", "spec.parameters.pathTests: Invalid value: [0].subPath"},
		{"pathTests condition", assignHead + "  location: spec.x\n  parameters:\n    assign: {value: 1}\n    pathTests: [{subPath: spec.x, condition: Exists}]\n", `spec.parameters.pathTests[0].condition: Unsupported value: "Exists": supported values: "MustExist", "MustNotExist"`},
		{"pathTests syntax", assignHead + "  location: spec.x\n  parameters:\n    assign: {value: 1}\n    pathTests: [{subPath: 'spec..x', condition: MustExist}]\n", `spec.parameters.pathTests[0].subPath: Invalid value: "spec..x": unexpected "." at column 6`},
		{"match scope", assignHead + "  match: {scope: Everywhere}\n  location: spec.x\n  parameters: {assign: {value: 1}}\n", `spec.match.scope: Unsupported value: "Everywhere": supported values: "Namespaced", "Cluster", "*"`},
		{"match source", assignHead + "  match: {source: Mine}\n  location: spec.x\n  parameters: {assign: {value: 1}}\n", "spec.match.source"},
		{"match typo", assignHead + "  match: {namespace: [a]}\n  location: spec.x\n  parameters: {assign: {value: 1}}\n", "spec.match.namespace: Forbidden: unknown field"},
		{"match glob", assignHead + "  match: {namespaces: ['a*b']}\n  location: spec.x\n  parameters: {assign: {value: 1}}\n", "spec.match.namespaces"},
		{"label selector", assignHead + "  match: {labelSelector: {matchLabel: {a: b}}}\n  location: spec.x\n  parameters: {assign: {value: 1}}\n", "spec.match.labelSelector"},
		{"order", "apiVersion: mutations.gatekeeper.sh/v1\nkind: AssignMetadata\nmetadata: {name: a, annotations: {morph.dev/order: first}}\nspec:\n  location: metadata.labels.x\n  parameters: {assign: {value: val}}\n", `metadata.annotations[morph.dev/order]: Invalid value: "first": not a whole number; give one such as "10"`},
		{"metadata location", "apiVersion: mutations.gatekeeper.sh/v1\nkind: AssignMetadata\nmetadata: {name: a}\nspec:\n  location: metadata.name\n  parameters: {assign: {value: val}}\n", "AssignMetadata may only set metadata.labels.<key> or metadata.annotations.<key>"},
		{"metadata value", "apiVersion: mutations.gatekeeper.sh/v1\nkind: AssignMetadata\nmetadata: {name: a}\nspec:\n  location: metadata.labels.x\n  parameters: {assign: {value: 3}}\n", "labels and annotations are strings"},
		{"metadata applyTo", "apiVersion: mutations.gatekeeper.sh/v1\nkind: AssignMetadata\nmetadata: {name: a}\nspec:\n  applyTo: [{groups: [''], versions: [v1], kinds: [Pod]}]\n  location: metadata.labels.x\n  parameters: {assign: {value: val}}\n", "spec.applyTo: Forbidden: unknown field; the fields here are match, location, parameters"},
		{"modifyset operation", "apiVersion: mutations.gatekeeper.sh/v1\nkind: ModifySet\nmetadata: {name: a}\nspec:\n  applyTo: [{groups: [''], versions: [v1], kinds: [Pod]}]\n  location: spec.x\n  parameters: {operation: add, values: {fromList: [a]}}\n", `spec.parameters.operation: Unsupported value: "add": supported values: "merge", "prune"`},
		{"modifyset list end", "apiVersion: mutations.gatekeeper.sh/v1\nkind: ModifySet\nmetadata: {name: a}\nspec:\n  applyTo: [{groups: [''], versions: [v1], kinds: [Pod]}]\n  location: 'spec.x[name: y]'\n  parameters: {values: {fromList: [a]}}\n", "ModifySet must end in a field"},
		{"image nothing", "apiVersion: mutations.gatekeeper.sh/v1alpha1\nkind: AssignImage\nmetadata: {name: a}\nspec:\n  applyTo: [{groups: [''], versions: [v1], kinds: [Pod]}]\n  location: 'spec.containers[name: *].image'\n  parameters: {}\n", "at least one of [assignDomain, assignPath, assignTag] must be set"},
		{"image tag", "apiVersion: mutations.gatekeeper.sh/v1alpha1\nkind: AssignImage\nmetadata: {name: a}\nspec:\n  applyTo: [{groups: [''], versions: [v1], kinds: [Pod]}]\n  location: 'spec.containers[name: *].image'\n  parameters: {assignTag: latest}\n", `spec.parameters.assignTag: Invalid value: "latest": assignTag "latest" must be a valid docker image tag or digest starting with ':' or '@'`},
		{"image digest", "apiVersion: mutations.gatekeeper.sh/v1alpha1\nkind: AssignImage\nmetadata: {name: a}\nspec:\n  applyTo: [{groups: [''], versions: [v1], kinds: [Pod]}]\n  location: 'spec.containers[name: *].image'\n  parameters: {assignTag: '@sha256:abc'}\n", "spec.parameters.assignTag"},
		{"image domain slash", "apiVersion: mutations.gatekeeper.sh/v1alpha1\nkind: AssignImage\nmetadata: {name: a}\nspec:\n  applyTo: [{groups: [''], versions: [v1], kinds: [Pod]}]\n  location: 'spec.containers[name: *].image'\n  parameters: {assignDomain: a.io/b}\n", `spec.parameters.assignDomain: Invalid value: "a.io/b": assignDomain "a.io/b" must be a fully-qualified domain name or localhost`},
		{"image domain shape", "apiVersion: mutations.gatekeeper.sh/v1alpha1\nkind: AssignImage\nmetadata: {name: a}\nspec:\n  applyTo: [{groups: [''], versions: [v1], kinds: [Pod]}]\n  location: 'spec.containers[name: *].image'\n  parameters: {assignDomain: registry}\n", `assignDomain "registry" must be a fully-qualified domain name or localhost`},
		{"image path like domain", "apiVersion: mutations.gatekeeper.sh/v1alpha1\nkind: AssignImage\nmetadata: {name: a}\nspec:\n  applyTo: [{groups: [''], versions: [v1], kinds: [Pod]}]\n  location: 'spec.containers[name: *].image'\n  parameters: {assignPath: my.repo.lib/app}\n", `spec.parameters.assignPath: Invalid value: "my.repo.lib/app": assignDomain must be set if the first part of assignPath "my.repo.lib/app" can be interpreted as part of a domain`},
		{"image path slash", "apiVersion: mutations.gatekeeper.sh/v1alpha1\nkind: AssignImage\nmetadata: {name: a}\nspec:\n  applyTo: [{groups: [''], versions: [v1], kinds: [Pod]}]\n  location: 'spec.containers[name: *].image'\n  parameters: {assignPath: /app}\n", `assignPath "/app" must be a valid docker image path`},
		{"image v1", "apiVersion: mutations.gatekeeper.sh/v1\nkind: AssignImage\nmetadata: {name: a}\nspec:\n  applyTo: [{groups: [''], versions: [v1], kinds: [Pod]}]\n  location: 'spec.containers[name: *].image'\n  parameters: {assignTag: ':v1'}\n", `apiVersion: Invalid value: "mutations.gatekeeper.sh/v1": AssignImage is served only as mutations.gatekeeper.sh/v1alpha1`},
		{"pathTests key under a glob", assignHead + "  location: 'spec.containers[name: *].imagePullPolicy'\n  parameters:\n    assign: {value: Always}\n    pathTests: [{subPath: 'spec.containers[name: side]', condition: MustNotExist}]\n", `subpath "spec.containers[name: side]" is not a prefix of location`},
		{"pathTests MustExist after MustNotExist", assignHead + "  location: 'spec.containers[name: x].image'\n  parameters:\n    assign: {value: a}\n    pathTests: [{subPath: 'spec.containers[name: x].image', condition: MustNotExist}, {subPath: 'spec.containers', condition: MustExist}]\n", `[1]: conflicting path test conditions: path "spec.containers" is marked MustExist but parent "spec.containers[name: x].image" MustNotExist`},
		{"external data off", assignHead + "  location: spec.x\n  parameters: {assign: {externalData: {provider: p}}}\n", "pass --allow-external-data"},
		{"duplicate", assignHead + "  location: spec.x\n  parameters: {assign: {value: 1}}\n---\n" + assignHead + "  location: spec.y\n  parameters: {assign: {value: 1}}\n", `document 2 (Assign "a"): metadata.name: Duplicate value: "a": another Assign has this name (policies/test.yaml: document 1 (Assign "a")); names must be unique`},
		{"namespaced", "apiVersion: mutations.gatekeeper.sh/v1\nkind: Assign\nmetadata: {name: a, namespace: x}\nspec: {}\n", "cluster-scoped"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := compile(t, Options{}, tc.policy)
			if err == nil {
				t.Fatalf("no error; bundle has %d mutators", len(b.Mutators))
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q\nwant it to contain %q", err, tc.want)
			}
			if !strings.HasPrefix(err.Error(), "policies/test.yaml: document ") {
				t.Fatalf("error %q does not name the file and document", err)
			}
		})
	}
}

// TestCompileKeepsOthers checks that one bad policy does not reject the others.
func TestCompileKeepsOthers(t *testing.T) {
	b, err := compile(t, Options{}, assignHead+"  location: 'spec.'\n  parameters: {assign: {value: 1}}\n---\n"+
		strings.Replace(assignHead, "name: a", "name: b", 1)+"  location: spec.x\n  parameters: {assign: {value: 1}}\n")
	if err == nil || len(b.Mutators) != 1 || b.Mutators[0].ID.Name != "b" {
		t.Fatalf("err = %v, mutators = %v", err, b.Mutators)
	}
}

func TestIDAndTargets(t *testing.T) {
	b, err := compile(t, Options{}, `apiVersion: mutations.gatekeeper.sh/v1
kind: Assign
metadata: {name: jobs, annotations: {morph.dev/order: "-5"}}
spec:
  applyTo:
  - groups: ["batch"]
    kind: ["Job"]
    versions: ["v1"]
  location: spec.ttlSecondsAfterFinished
  parameters: {assign: {value: 100}}
---
apiVersion: mutations.gatekeeper.sh/v1
kind: AssignMetadata
metadata: {name: md}
spec:
  match:
    kinds: [{apiGroups: [""], kinds: [Pod, Service]}]
  location: metadata.labels.x
  parameters: {assign: {value: val}}
---
apiVersion: mutations.gatekeeper.sh/v1
kind: AssignMetadata
metadata: {name: all}
spec:
  location: metadata.labels.x
  parameters: {assign: {value: val}}
---
apiVersion: mutations.gatekeeper.sh/v1
kind: Assign
metadata: {name: ops}
spec:
  applyTo: [{groups: [""], versions: [v1], kinds: [Pod], operations: ["*"]}, {groups: [""], versions: [v1], kinds: [Service], operations: [UPDATE]}]
  location: spec.x
  parameters: {assign: {value: 1}}
`)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]engine.Mutator{}
	for _, m := range b.Mutators {
		byName[m.ID.Name] = m
	}
	jobs := byName["jobs"]
	if id := jobs.ID; id != (engine.ID{Order: -5, Dialect: "gatekeeper", Kind: "Assign", Name: "jobs"}) {
		t.Errorf("ID = %+v", id)
	}
	cu := createUpdate()
	upd, _ := engine.OperationsOf("UPDATE")
	for name, want := range map[string][]engine.Target{
		"jobs": {{Group: "batch", Version: "v1", Kind: "Job", Operations: cu}},
		"md":   {{Group: "", Version: "*", Kind: "Pod", Operations: cu}, {Group: "", Version: "*", Kind: "Service", Operations: cu}},
		"all":  {{Group: "*", Version: "*", Kind: "*", Operations: cu}},
		"ops":  {{Group: "", Version: "v1", Kind: "Pod", Operations: cu}, {Group: "", Version: "v1", Kind: "Service", Operations: upd}},
	} {
		got := byName[name].Targets
		if len(got) != len(want) {
			t.Errorf("%s: targets %+v, want %+v", name, got, want)
			continue
		}
		for i := range got {
			if got[i] != want[i] {
				t.Errorf("%s: target %d = %+v, want %+v", name, i, got[i], want[i])
			}
		}
	}
}

func TestMutate(t *testing.T) {
	pod := `apiVersion: v1
kind: Pod
metadata: {name: p, namespace: ns, labels: {a: b}}
spec:
  containers:
  - {name: app, image: nginx, ports: [{containerPort: 80, protocol: TCP}], args: [x, y, x]}
  - {name: side, image: "localhost:5000/side@sha256:0123456789abcdef0123456789abcdef"}
`
	tests := []struct {
		name, policy string
		input        string
		// want is the whole result, or "" for "unchanged".
		want string
		// paths are the pointers the mutator must record.
		paths []string
	}{
		{
			name:   "create parents and an element",
			policy: assignHead + "  location: 'spec.initContainers[name: init].securityContext.runAsUser'\n  parameters: {assign: {value: 1000}}\n",
			input:  `{apiVersion: v1, kind: Pod, metadata: {name: p}, spec: {}}`,
			want:   `{apiVersion: v1, kind: Pod, metadata: {name: p}, spec: {initContainers: [{name: init, securityContext: {runAsUser: 1000}}]}}`,
			paths:  []string{"/spec/initContainers/0/securityContext/runAsUser"},
		},
		{
			name:   "equal value changes nothing",
			policy: assignHead + "  location: 'spec.containers[name: app].image'\n  parameters: {assign: {value: nginx}}\n",
			input:  pod,
		},
		{
			name:   "integer key",
			policy: assignHead + "  location: 'spec.containers[name: app].ports[containerPort: 80].protocol'\n  parameters: {assign: {value: UDP}}\n",
			input:  `{apiVersion: v1, kind: Pod, metadata: {name: p}, spec: {containers: [{name: app, ports: [{containerPort: 80, protocol: TCP}]}]}}`,
			want:   `{apiVersion: v1, kind: Pod, metadata: {name: p}, spec: {containers: [{name: app, ports: [{containerPort: 80, protocol: UDP}]}]}}`,
			paths:  []string{"/spec/containers/0/ports/0/protocol"},
		},
		{
			name:   "integer key creates a number",
			policy: assignHead + "  location: 'spec.containers[name: app].ports[containerPort: 8080].protocol'\n  parameters: {assign: {value: TCP}}\n",
			input:  `{apiVersion: v1, kind: Pod, metadata: {name: p}, spec: {containers: [{name: app, ports: [{containerPort: "8080"}]}]}}`,
			want:   `{apiVersion: v1, kind: Pod, metadata: {name: p}, spec: {containers: [{name: app, ports: [{containerPort: "8080"}, {containerPort: 8080, protocol: TCP}]}]}}`,
		},
		{
			name:   "glob never creates",
			policy: assignHead + "  location: 'spec.containers[name: *].imagePullPolicy'\n  parameters: {assign: {value: Always}}\n",
			input:  `{apiVersion: v1, kind: Pod, metadata: {name: p}, spec: {}}`,
		},
		{
			name:   "replace a whole element",
			policy: assignHead + "  location: 'spec.containers[name: app]'\n  parameters: {assign: {value: {name: app, image: busybox}}}\n",
			input:  `{apiVersion: v1, kind: Pod, metadata: {name: p}, spec: {containers: [{name: app, image: nginx, args: [a]}]}}`,
			want:   `{apiVersion: v1, kind: Pod, metadata: {name: p}, spec: {containers: [{name: app, image: busybox}]}}`,
		},
		{
			name:   "MustExist stops creation",
			policy: assignHead + "  location: 'spec.containers[name: x].image'\n  parameters:\n    assign: {value: a}\n    pathTests: [{subPath: 'spec.containers[name: x]', condition: MustExist}]\n",
			input:  pod,
		},
		{
			// Gatekeeper's core.Mutate descends into every element of a glob, also one
			// without the key field.
			name:   "glob visits elements without the key",
			policy: assignHead + "  location: 'spec.tolerations[key: *].operator'\n  parameters: {assign: {value: Exists}}\n",
			input:  `{apiVersion: v1, kind: Pod, metadata: {name: p}, spec: {tolerations: [{key: a, operator: Equal}, {operator: Equal}]}}`,
			want:   `{apiVersion: v1, kind: Pod, metadata: {name: p}, spec: {tolerations: [{key: a, operator: Exists}, {operator: Exists}]}}`,
		},
		{
			// Keys may repeat (env names do): Gatekeeper's core.Mutate changes every match.
			name:   "a key matching twice changes both",
			policy: assignHead + "  location: 'spec.containers[name: app].env[name: A].value'\n  parameters: {assign: {value: x}}\n",
			input:  `{apiVersion: v1, kind: Pod, metadata: {name: p}, spec: {containers: [{name: app, env: [{name: A, value: a}, {name: B}, {name: A}]}]}}`,
			want:   `{apiVersion: v1, kind: Pod, metadata: {name: p}, spec: {containers: [{name: app, env: [{name: A, value: x}, {name: B}, {name: A, value: x}]}]}}`,
		},
		{
			// Reaching the setter keeps the parents the walk created (core.Mutate), even
			// when ModifySet's prune of a missing list leaves the field missing.
			name:   "prune of a missing element creates it",
			policy: "apiVersion: mutations.gatekeeper.sh/v1\nkind: ModifySet\nmetadata: {name: m}\nspec:\n  applyTo: [{groups: [''], versions: [v1], kinds: [Pod]}]\n  location: 'spec.containers[name: side].args'\n  parameters: {operation: prune, values: {fromList: [a]}}\n",
			input:  `{apiVersion: v1, kind: Pod, metadata: {name: p}, spec: {containers: [{name: app}]}}`,
			want:   `{apiVersion: v1, kind: Pod, metadata: {name: p}, spec: {containers: [{name: app}, {name: side}]}}`,
		},
		{
			// mutators/assignimage setter: a missing image is built from the parts alone.
			name:   "assign image on a missing image",
			policy: "apiVersion: mutations.gatekeeper.sh/v1alpha1\nkind: AssignImage\nmetadata: {name: m}\nspec:\n  applyTo: [{groups: [''], versions: [v1], kinds: [Pod]}]\n  location: 'spec.containers[name: app].image'\n  parameters: {assignTag: ':v2'}\n",
			input:  `{apiVersion: v1, kind: Pod, metadata: {name: p}, spec: {containers: [{name: app}]}}`,
			want:   `{apiVersion: v1, kind: Pod, metadata: {name: p}, spec: {containers: [{name: app, image: ':v2'}]}}`,
		},
		{
			name:   "fromMetadata name",
			policy: assignHead + "  location: spec.hostname\n  parameters: {assign: {fromMetadata: {field: name}}}\n",
			input:  `{apiVersion: v1, kind: Pod, metadata: {name: p}, spec: {}}`,
			want:   `{apiVersion: v1, kind: Pod, metadata: {name: p}, spec: {hostname: p}}`,
		},
		{
			name:   "assign metadata keeps an existing label",
			policy: "apiVersion: mutations.gatekeeper.sh/v1\nkind: AssignMetadata\nmetadata: {name: m}\nspec:\n  location: metadata.labels.a\n  parameters: {assign: {value: c}}\n",
			input:  pod,
		},
		{
			name:   "assign metadata creates labels",
			policy: "apiVersion: mutations.gatekeeper.sh/v1\nkind: AssignMetadata\nmetadata: {name: m}\nspec:\n  location: 'metadata.labels.\"a.b/c\"'\n  parameters: {assign: {value: d}}\n",
			input:  `{apiVersion: v1, kind: Pod, metadata: {name: p}}`,
			want:   `{apiVersion: v1, kind: Pod, metadata: {name: p, labels: {a.b/c: d}}}`,
			paths:  []string{"/metadata/labels/a.b~1c"},
		},
		{
			name:   "modifyset merge creates the list",
			policy: "apiVersion: mutations.gatekeeper.sh/v1\nkind: ModifySet\nmetadata: {name: m}\nspec:\n  applyTo: [{groups: [''], versions: [v1], kinds: [Pod]}]\n  location: 'spec.containers[name: app].command'\n  parameters: {values: {fromList: [a, b, a]}}\n",
			input:  `{apiVersion: v1, kind: Pod, metadata: {name: p}, spec: {containers: [{name: app}]}}`,
			// A missing list becomes fromList as given, duplicates included
			// (modifyset setter.setValueMerge).
			want: `{apiVersion: v1, kind: Pod, metadata: {name: p}, spec: {containers: [{name: app, command: [a, b, a]}]}}`,
		},
		{
			name:   "modifyset merge appends only the missing",
			policy: "apiVersion: mutations.gatekeeper.sh/v1\nkind: ModifySet\nmetadata: {name: m}\nspec:\n  applyTo: [{groups: [''], versions: [v1], kinds: [Pod]}]\n  location: 'spec.containers[name: app].args'\n  parameters: {operation: merge, values: {fromList: [y, z]}}\n",
			input:  pod,
			want: `apiVersion: v1
kind: Pod
metadata: {name: p, namespace: ns, labels: {a: b}}
spec:
  containers:
  - {name: app, image: nginx, ports: [{containerPort: 80, protocol: TCP}], args: [x, y, x, z]}
  - {name: side, image: "localhost:5000/side@sha256:0123456789abcdef0123456789abcdef"}
`,
		},
		{
			name:   "modifyset prune removes every copy",
			policy: "apiVersion: mutations.gatekeeper.sh/v1\nkind: ModifySet\nmetadata: {name: m}\nspec:\n  applyTo: [{groups: [''], versions: [v1], kinds: [Pod]}]\n  location: 'spec.containers[name: *].args'\n  parameters: {operation: prune, values: {fromList: [x]}}\n",
			input:  pod,
			want: `apiVersion: v1
kind: Pod
metadata: {name: p, namespace: ns, labels: {a: b}}
spec:
  containers:
  - {name: app, image: nginx, ports: [{containerPort: 80, protocol: TCP}], args: [y]}
  - {name: side, image: "localhost:5000/side@sha256:0123456789abcdef0123456789abcdef"}
`,
		},
		{
			name:   "modifyset prune of a missing list",
			policy: "apiVersion: mutations.gatekeeper.sh/v1\nkind: ModifySet\nmetadata: {name: m}\nspec:\n  applyTo: [{groups: [''], versions: [v1], kinds: [Pod]}]\n  location: 'spec.containers[name: *].command'\n  parameters: {operation: prune, values: {fromList: [x]}}\n",
			input:  pod,
		},
		{
			name:   "assignimage keeps a localhost domain and digest",
			policy: "apiVersion: mutations.gatekeeper.sh/v1alpha1\nkind: AssignImage\nmetadata: {name: m}\nspec:\n  applyTo: [{groups: [''], versions: [v1], kinds: [Pod]}]\n  location: 'spec.containers[name: *].image'\n  parameters: {assignPath: lib/app}\n",
			input:  pod,
			want: `apiVersion: v1
kind: Pod
metadata: {name: p, namespace: ns, labels: {a: b}}
spec:
  containers:
  - {name: app, image: lib/app, ports: [{containerPort: 80, protocol: TCP}], args: [x, y, x]}
  - {name: side, image: "localhost:5000/lib/app@sha256:0123456789abcdef0123456789abcdef"}
`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := compile(t, Options{}, tc.policy)
			if err != nil {
				t.Fatal(err)
			}
			in := obj(t, tc.input)
			before := engine.DeepCopyMap(in)
			m := b.Mutators[0]
			req := objectRequest(in, nil, engine.Create)
			w := engine.NewWriter()
			out, err := m.Mutate(context.Background(), req, in, w)
			if err != nil {
				t.Fatal(err)
			}
			if !engine.Equal(in, before) {
				t.Fatal("Mutate modified its input")
			}
			if tc.want == "" {
				if w.HasChanges() || !engine.Equal(out, in) {
					t.Fatalf("changed %v: %v", w.Paths(), out)
				}
				return
			}
			want := obj(t, tc.want)
			if !engine.Equal(out, want) {
				g, _ := yaml.Marshal(out)
				t.Fatalf("got\n%s", g)
			}
			if !w.HasChanges() {
				t.Fatal("no changed path recorded")
			}
			if tc.paths != nil && strings.Join(w.Paths(), " ") != strings.Join(tc.paths, " ") {
				t.Fatalf("paths %v, want %v", w.Paths(), tc.paths)
			}
			// The result is a fixed point.
			w2 := engine.NewWriter()
			if _, err := m.Mutate(context.Background(), req, out, w2); err != nil || w2.HasChanges() {
				t.Fatalf("second run: %v %v", err, w2.Paths())
			}
		})
	}
}

func TestMutateTypeMismatch(t *testing.T) {
	b, err := compile(t, Options{}, assignHead+"  location: 'spec.containers[name: a].image'\n  parameters: {assign: {value: x}}\n")
	if err != nil {
		t.Fatal(err)
	}
	in := obj(t, `{apiVersion: v1, kind: Pod, metadata: {name: p}, spec: {containers: {a: b}}}`)
	_, err = b.Mutators[0].Mutate(context.Background(), objectRequest(in, nil, engine.Create), in, engine.NewWriter())
	if err == nil || !strings.Contains(err.Error(), "spec.containers: expected a list, found an object") {
		t.Fatalf("err = %v", err)
	}
}

func TestParseImage(t *testing.T) {
	for _, tc := range []struct{ in, domain, path, tag string }{
		{"nginx", "", "nginx", ""},
		{"nginx:1.25", "", "nginx", ":1.25"},
		{"library/nginx@sha256:abc", "", "library/nginx", "@sha256:abc"},
		{"my.registry.io:2000/repo/app:latest", "my.registry.io:2000", "repo/app", ":latest"},
		{"localhost/app", "localhost", "app", ""},
		{"localhost:5000/a/b:c", "localhost:5000", "a/b", ":c"},
		{"envoyproxy/envoy:v1.31.2", "", "envoyproxy/envoy", ":v1.31.2"},
		{"docker.io/example/checkout:1.14.2", "docker.io", "example/checkout", ":1.14.2"},
		{"a.io/b:c@sha256:d", "a.io", "b", ":c@sha256:d"}, // one tag to Gatekeeper's splitter
		{"", "", "", ""},
	} {
		img := parseImage(tc.in)
		if img != (image{tc.domain, tc.path, tc.tag}) {
			t.Errorf("parseImage(%q) = %+v", tc.in, img)
		}
		if img.String() != tc.in {
			t.Errorf("String() = %q, want %q", img.String(), tc.in)
		}
	}
}

func TestMatch(t *testing.T) {
	ns := obj(t, `{apiVersion: v1, kind: Namespace, metadata: {name: apps, labels: {env: prod}}}`)
	pod := obj(t, `{apiVersion: v1, kind: Pod, metadata: {name: web-1, namespace: apps, labels: {team: a}}}`)
	gen := obj(t, `{apiVersion: v1, kind: Pod, metadata: {generateName: web-, namespace: apps}}`)
	node := obj(t, `{apiVersion: v1, kind: Node, metadata: {name: n1}}`)
	tests := []struct {
		match string
		o     map[string]any
		ns    map[string]any
		src   engine.Source
		want  bool
	}{
		{"{}", pod, ns, "", true},
		{"{scope: Namespaced}", pod, ns, "", true},
		{"{scope: Cluster}", pod, ns, "", false},
		{"{scope: Cluster}", node, nil, "", true},
		{"{scope: Namespaced}", node, nil, "", false},
		{"{kinds: [{apiGroups: ['*'], kinds: [Pod]}]}", pod, ns, "", true},
		{"{kinds: [{apiGroups: [apps], kinds: [Pod]}]}", pod, ns, "", false},
		{"{kinds: [{kinds: ['*']}]}", pod, ns, "", true},
		{"{labelSelector: {matchLabels: {team: a}}}", pod, ns, "", true},
		{"{labelSelector: {matchExpressions: [{key: team, operator: NotIn, values: [a]}]}}", pod, ns, "", false},
		{"{namespaces: [apps]}", pod, ns, "", true},
		{"{namespaces: ['ap*']}", pod, ns, "", true},
		{"{namespaces: ['*ps']}", pod, ns, "", true},
		{"{namespaces: [other]}", pod, ns, "", false},
		{"{namespaces: [other]}", node, nil, "", true},
		{"{excludedNamespaces: ['app*']}", pod, ns, "", false},
		{"{namespaceSelector: {matchLabels: {env: prod}}}", pod, ns, "", true},
		{"{namespaceSelector: {matchLabels: {env: dev}}}", pod, ns, "", false},
		{"{namespaceSelector: {matchLabels: {env: prod}}}", ns, nil, "", true},
		{"{namespaces: [apps]}", ns, nil, "", true},
		{"{name: 'web-*'}", pod, ns, "", true},
		{"{name: 'db-*'}", pod, ns, "", false},
		{"{name: 'web-*'}", gen, ns, "", true},
		{"{source: Original}", pod, ns, "", true},
		{"{source: Original}", pod, ns, engine.SourceGenerated, false},
		{"{source: Generated}", pod, ns, engine.SourceGenerated, true},
		{"{source: All}", pod, ns, engine.SourceGenerated, true},
		{"{labelSelector: []}", pod, ns, "", true},
	}
	for _, tc := range tests {
		t.Run(tc.match, func(t *testing.T) {
			b, err := compile(t, Options{}, "apiVersion: mutations.gatekeeper.sh/v1\nkind: AssignMetadata\nmetadata: {name: m}\nspec:\n  match: "+tc.match+"\n  location: metadata.labels.x\n  parameters: {assign: {value: val}}\n")
			if err != nil {
				t.Fatal(err)
			}
			req := objectRequest(tc.o, tc.ns, engine.Create)
			req.Source = tc.src
			got, err := matches(b.Mutators[0], req, tc.o)
			if err != nil || got != tc.want {
				t.Fatalf("Matches(%s) = %v, %v; want %v", tc.o["kind"], got, err, tc.want)
			}
		})
	}
	t.Run("namespace from the context store", func(t *testing.T) {
		d := New(Options{})
		store := d.(*Dialect).opts.Objects
		if err := store.Add(ns); err != nil {
			t.Fatal(err)
		}
		docs, _ := policy.Decode("p.yaml", []byte("apiVersion: mutations.gatekeeper.sh/v1\nkind: AssignMetadata\nmetadata: {name: m}\nspec:\n  match: {namespaceSelector: {matchLabels: {env: prod}}}\n  location: metadata.labels.x\n  parameters: {assign: {value: val}}\n"))
		b, err := d.Compile(docs)
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := matches(b.Mutators[0], objectRequest(pod, nil, engine.Create), pod); !ok || err != nil {
			t.Fatalf("Matches = %v, %v", ok, err)
		}
		other := obj(t, `{apiVersion: v1, kind: Pod, metadata: {name: x, namespace: missing}}`)
		if _, err := matches(b.Mutators[0], objectRequest(other, nil, engine.Create), other); err == nil || !strings.Contains(err.Error(), "--context") {
			t.Fatalf("err = %v", err)
		}
	})
}

func TestSchemaConflicts(t *testing.T) {
	mk := func(kind, name, loc, params string) string {
		api := "mutations.gatekeeper.sh/v1"
		if kind == "AssignImage" {
			api = "mutations.gatekeeper.sh/v1alpha1"
		}
		return "apiVersion: " + api + "\nkind: " + kind + "\nmetadata: {name: " + name + "}\nspec:\n  applyTo: [{groups: [''], versions: [v1], kinds: [Pod]}]\n  location: '" + loc + "'\n  parameters: " + params + "\n"
	}
	tests := []struct {
		name    string
		docs    []string
		skipped []string
		warn    string
	}{
		{"object vs list", []string{
			mk("Assign", "obj", "spec.foo.bar", "{assign: {value: 1}}"),
			mk("Assign", "list", "spec.foo[name: x].bar", "{assign: {value: 1}}"),
			mk("Assign", "fine", "spec.other", "{assign: {value: 1}}"),
		}, []string{"obj", "list"}, `schema conflict at spec.foo of v1 Pod: Assign "list" (policies/test.yaml: document 2) treats it as a list keyed by "name", Assign "obj" (policies/test.yaml: document 1) treats it as an object`},
		{"different keys", []string{
			mk("Assign", "byname", "spec.containers[name: *].image", "{assign: {value: x}}"),
			mk("Assign", "byimage", "spec.containers[image: x].name", "{assign: {value: x}}"),
		}, []string{"byname", "byimage"}, `list keyed by "image"`},
		{"set vs keyed list", []string{
			mk("ModifySet", "set", "spec.containers[name: *].args", "{values: {fromList: [a]}}"),
			mk("Assign", "keyed", "spec.containers[name: *].args[name: a].x", "{assign: {value: 1}}"),
		}, []string{"set", "keyed"}, "ModifySet"},
		{"agreeing", []string{
			mk("Assign", "a", "spec.containers[name: *].image", "{assign: {value: x}}"),
			mk("AssignImage", "b", "spec.containers[name: app].image", "{assignTag: ':v1'}"),
			mk("ModifySet", "c", "spec.containers[name: app].args", "{values: {fromList: [a]}}"),
		}, nil, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := compile(t, Options{}, strings.Join(tc.docs, "---\n"))
			if err != nil {
				t.Fatal(err)
			}
			kept := map[string]bool{}
			for _, m := range b.Mutators {
				kept[m.ID.Name] = true
			}
			for _, s := range tc.skipped {
				if kept[s] {
					t.Errorf("%s was not skipped", s)
				}
			}
			if len(b.Mutators) != len(tc.docs)-len(tc.skipped) {
				t.Errorf("kept %v", kept)
			}
			// Each skipped mutator is a policy.Skipped fact naming its document.
			var skipped []string
			for _, sk := range b.Skipped {
				skipped = append(skipped, sk.Doc.Name())
				if tc.warn != "" && !strings.Contains(sk.Reason, tc.warn) {
					t.Errorf("%s skipped for %q, want %q", sk.Doc.Name(), sk.Reason, tc.warn)
				}
			}
			slices.Sort(skipped)
			if want := slices.Sorted(slices.Values(tc.skipped)); !slices.Equal(skipped, want) {
				t.Errorf("Bundle.Skipped names %v, want %v", skipped, want)
			}
			if tc.warn == "" {
				if len(b.Warnings) != 0 {
					t.Errorf("warnings: %v", b.Warnings)
				}
				return
			}
			if len(b.Warnings) == 0 || !strings.Contains(strings.Join(b.Warnings, "\n"), tc.warn) {
				t.Errorf("warnings %q, want %q", b.Warnings, tc.warn)
			}
		})
	}
}

// TestUnchangedAllocatesNothing checks the walk of a converged object: the second pass
// of every request.
func TestUnchangedAllocatesNothing(t *testing.T) {
	wl := loadWorkload(t)
	raw, err := os.ReadFile(filepath.Join(workloadDir, "mutators-100.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	docs, err := policy.Decode("mutators-100.yaml", raw)
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(Options{}).Compile(docs)
	if err != nil {
		t.Fatal(err)
	}
	req := podRequest(wl.expected, wl.ns, engine.Create)
	req.Kind = schema.GroupVersionKind{Version: "v1", Kind: "Pod"}
	w := engine.NewWriter()
	ctx := context.Background()
	allocs := testing.AllocsPerRun(50, func() {
		for _, m := range b.Mutators {
			if !targetsPod(m.Targets) {
				continue
			}
			if _, err := m.Mutate(ctx, req, wl.expected, w); err != nil {
				t.Fatal(err)
			}
		}
	})
	if allocs != 0 || w.HasChanges() {
		t.Fatalf("%v allocations, %d changes", allocs, len(w.Paths()))
	}
}

func targetsPod(ts []engine.Target) bool {
	for _, t := range ts {
		if t.Operations.Has(engine.Create) && (t.Group == "" || t.Group == "*") && (t.Version == "v1" || t.Version == "*") && (t.Kind == "Pod" || t.Kind == "*") {
			return true
		}
	}
	return false
}

func FuzzParseImage(f *testing.F) {
	for _, s := range []string{"nginx", "nginx:1.25", "my.registry.io:2000/repo/app:latest", "localhost/a@sha256:0123", "a.io/b:c@d", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, ref string) {
		img := parseImage(ref)
		if img.String() != ref {
			t.Fatalf("parseImage(%q) = %+v prints %q", ref, img, img.String())
		}
		// Assigning a domain converges: a second assignment changes nothing.
		s := &imageSetter{parts: imageParts{domain: "registry.example.internal"}}
		once, changed, err := s.set(env{}, ref, true)
		if err != nil || !changed {
			return
		}
		if _, changed, _ := s.set(env{}, once, true); changed {
			t.Fatalf("not convergent: %q -> %q", ref, once)
		}
	})
}

// matches reports whether a mutator that sets a missing label applies to obj: whether
// it changes it.
func matches(m engine.Mutator, req *engine.Request, obj map[string]any) (bool, error) {
	w := engine.NewWriter()
	if _, err := m.Mutate(context.Background(), req, obj, w); err != nil {
		return false, err
	}
	return w.HasChanges(), nil
}
