package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"
)

// celDiffCase is one case of TestCELDifferential: the folder
// testdata/cel-differential/<name> holds policy.yaml (MutatingAdmissionPolicies and their
// bindings), input.yaml (one object) and optionally params.yaml (objects created in the
// case's namespace before the policies, and given to morph as context).
type celDiffCase struct {
	name string
	// namespaceLabels label the case's namespace (besides the API server's
	// kubernetes.io/metadata.name).
	namespaceLabels map[string]string
	// mutates says whether the API server changes the input. It guards against a case
	// that passes only because no policy ran on either side.
	mutates bool
	// denies says that a policy fails (failurePolicy Fail), so that both the API server
	// and morph must reject the input.
	denies bool
}

// The resources the test creates through the API server.
var (
	mapGVR        = schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "mutatingadmissionpolicies"}
	mapBindingGVR = schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "mutatingadmissionpolicybindings"}
)

// Activation probe, see TestCELDifferential.
const (
	celProbeObjectLabel = "e2e.morph.dev/celdiff-probe"
	celProbeParamLabel  = "e2e.morph.dev/celdiff-probe-param"
	celProbeAnnotation  = "e2e.morph.dev/celdiff-probe"
	celProbeTimeout     = 30 * time.Second
	// celParamKeeperName names the inert policy and binding that keep the API server's
	// ConfigMap param informer running (see TestCELDifferential).
	celParamKeeperName  = "celdiff-configmap-param-keeper"
	celParamKeeperLabel = "e2e.morph.dev/celdiff-keeper"
	// namespaceNameLabel is the label the API server puts on every Namespace.
	namespaceNameLabel = "kubernetes.io/metadata.name"
)

// TestCELDifferential checks that morph's CEL dialect mutates as kube-apiserver's own
// MutatingAdmissionPolicy plugin does: for every case it lets the real API server and
// `morph apply` mutate the same input with the same policies, bindings, params and
// namespace, and fails with a readable diff on any difference.
//
// Each case runs in a fresh namespace (in parallel with the others):
//
//  1. The namespace (with the case's labels), the params and the probe param (below) are
//     created.
//  2. Before any policy of the case exists, the input is created with server-side dry-run:
//     that is the baseline, the object as the API server stores it without the case's
//     policies (defaulted, with its status).
//  3. morph runs offline (`morph apply -p <policies> -f input.yaml --context <params and
//     the Namespace as read from the API server> -n <namespace> -o json`). Its output is
//     then also created with dry-run, still before the policies exist, so that the API
//     server's defaulting (terminationMessagePath, imagePullPolicy, dnsPolicy,
//     schedulerName, a Deployment's strategy, status, ...) is applied to morph's result
//     exactly as it is to its own. The policies see the same object on both sides, except
//     that the API server's copy has been through its typed decoding and defaulting: the
//     cases read only fields the input sets, and that decoding leaves unchanged, except
//     quantity-canonical, which shows the difference that decoding makes.
//  4. The policies and bindings are created, the test waits for them to be active (probe,
//     below) and creates the input with dry-run again: the API server's mutated object.
//  5. After removing what differs between any two creates (metadata.uid,
//     creationTimestamp, resourceVersion, generation, managedFields), the API server's
//     mutated object must equal the defaulted morph output, field by field; the failure
//     message lists what each side changed relative to the baseline and where they
//     differ. Comparing whole objects after the same defaulting is stricter than
//     comparing the two change sets (it also catches list order and merge results), and
//     still immune to defaulting. Whether the API server changed the object at all must
//     match the case's mutates flag.
//
// A rejection is an outcome too: morph exiting with status 1 (a policy could not be
// evaluated) and the API server denying the dry-run create must happen together, and only
// in the cases marked denies; both messages are logged. morph's output is created only
// when morph admitted the input.
//
// The same policy file goes to both sides, rewritten by the test only in ways that do not
// change what it does to the input: every MutatingAdmissionPolicy and binding name gets
// the namespace's random suffix (cluster-scoped names stay unique across parallel cases
// and repeated runs), and every binding's matchResources gets two more selector terms:
// namespaceSelector kubernetes.io/metadata.name In [<namespace>] (a case's policies never
// touch another case's objects) and objectSelector <probe label> DoesNotExist (they never
// touch the probe). Params are created in the case's namespace and the input's
// metadata.namespace is set to it, as the API server sets it before admission.
//
// Probe: the API server loads policies, bindings and params from informers and swaps the
// whole set of compiled policies in at once (policy refresh), some time after they are
// created. So the test creates, after the case's params, a probe param (ConfigMap labelled
// celProbeParamLabel=<namespace>), and after the case's policies and bindings, a probe
// policy and binding: the policy takes ConfigMap params, matches only ConfigMaps labelled
// celProbeObjectLabel=<namespace> and annotates them with the param's data; its binding
// selects the probe param by label (a selector reads only the informer, never the API
// directly) with parameterNotFoundAction Allow. The test dry-run-creates a probe
// ConfigMap until it comes back annotated (bounded by celProbeTimeout). Each informer sees
// events in resourceVersion order, and the refresh reads the policy and binding caches
// together, so once the probe applies, every policy and binding created before the probe's
// and every ConfigMap param created before the probe param are active as well: a case
// whose policies must not apply is then known to have been evaluated, not just not yet
// loaded.
//
// ConfigMap params and the API server: for a built-in paramKind the API server uses its
// shared informer factory, started with a context that it cancels as soon as no policy
// uses that paramKind any more; the factory never starts that informer again. From then
// on, until the API server restarts, params selected by a selector are read from a frozen
// cache (by name, it falls back to a GET). So the test keeps one inert policy with
// paramKind ConfigMap (celParamKeeperName) in the cluster for good: it is created if
// missing, never deleted, and matches nothing (a ConfigMap label nobody sets). Without it,
// the second run of this test against the same API server (go test -count=2) would wait
// for probes that can never apply, since its first run deleted every ConfigMap-param policy.
//
// The API server runs the policies in an order it does not fix (a Go map), and reinvokes
// IfNeeded policies; morph orders by name. Cases with several policies are written so
// that the result does not depend on the order, which is also what the reinvocation case
// tests.
func TestCELDifferential(t *testing.T) {
	cases := []celDiffCase{
		{name: "labels", mutates: true},
		{name: "annotations-escaped-keys", mutates: true},
		{name: "containers-map", mutates: true},
		{name: "containers-sidecar", mutates: true},
		{name: "jsonpatch-pod", mutates: true},
		{name: "jsonpatch-configmap", mutates: true},
		{name: "match-conditions", mutates: true},
		{name: "match-conditions-none", mutates: false},
		{name: "variables-chained", mutates: true},
		{name: "params-by-name", mutates: true},
		{name: "params-by-selector", mutates: true},
		{name: "namespace-selector", namespaceLabels: map[string]string{"env": "prod", "team": "blue"}, mutates: true},
		{name: "namespace-selector-no-match", namespaceLabels: map[string]string{"env": "dev"}, mutates: false},
		{name: "object-selector", mutates: true},
		{name: "object-selector-no-match", mutates: false},
		{name: "exclude-resource-rules", mutates: false},
		{name: "reinvocation", mutates: true},
		{name: "mutation-order", mutates: true},
		{name: "no-change", mutates: false},
		{name: "deployment-template", mutates: true},
		{name: "configmap-apply", mutates: true},
		{name: "ignore-failure", mutates: true},
		{name: "deny-atomic-list", denies: true},
		{name: "deny-match-condition-error", denies: true},
		{name: "deny-param-not-found", denies: true},
		{name: "multiple-bindings", mutates: true},
		{name: "reinvocation-self", mutates: true},
		{name: "quantity-canonical", mutates: true},
	}
	c := Current(t)
	morph := buildMorph(t)
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(c.Kube.Discovery()))
	keepConfigMapParamInformer(t, c, mapper)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			runCELDiffCase(t, c, mapper, morph, tc)
		})
	}
}

// buildMorph builds cmd/morph from the repository root (two levels above this package)
// into a temporary folder and returns the binary's path.
func buildMorph(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatalf("find the repository root: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("find the repository root: %s has no go.mod: %v", root, err)
	}
	bin := filepath.Join(t.TempDir(), "morph")
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/morph")
	cmd.Dir = root
	start := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/morph in %s: %v\n%s", root, err, out)
	}
	t.Logf("built morph in %v", time.Since(start).Round(time.Millisecond))
	return bin
}

func runCELDiffCase(t *testing.T, c *Cluster, mapper meta.RESTMapper, morph string, tc celDiffCase) {
	dir := filepath.Join("testdata", "cel-differential", tc.name)
	policies := readObjects(t, filepath.Join(dir, "policy.yaml"), true)
	inputs := readObjects(t, filepath.Join(dir, "input.yaml"), true)
	if len(inputs) != 1 {
		t.Fatalf("%s/input.yaml: %d objects, want exactly one", dir, len(inputs))
	}
	params := readObjects(t, filepath.Join(dir, "params.yaml"), false)

	prefix := "celdiff-" + tc.name + "-"
	ns := CreateNamespace(t, prefix, tc.namespaceLabels)
	suffix := strings.TrimPrefix(ns.Name, prefix)

	// 1. Params, then the probe param (after them: see the probe).
	for _, p := range params {
		p.SetNamespace(ns.Name)
		createObject(t, c, mapper, p)
	}
	createObject(t, c, mapper, probeParam(ns.Name))

	input := inputs[0]
	input.SetNamespace(ns.Name)
	policies = scopePolicies(t, policies, ns.Name, suffix)

	// 2. The baseline: the input as the API server stores it without the policies.
	baseline := dryRunCreate(t, c, mapper, input, "the input, before the policies exist (baseline)")

	// 3. morph, offline, and its output defaulted by the API server.
	namespace, err := c.Kube.CoreV1().Namespaces().Get(t.Context(), ns.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get namespace %s: %v", ns.Name, err)
	}
	morphOut, morphErr := runMorph(t, morph, policies, input, params, namespace)
	var morphDefaulted *unstructured.Unstructured
	if morphErr == "" {
		morphDefaulted = dryRunCreate(t, c, mapper, morphOut, "morph's output, before the policies exist")
	}

	// 4. The policies, the probe, and the API server's own mutation.
	for _, p := range policies {
		createObject(t, c, mapper, p)
	}
	probePolicy, probeBinding := probePolicies(ns.Name)
	createObject(t, c, mapper, probePolicy)
	createObject(t, c, mapper, probeBinding)
	waitForProbe(t, c, ns.Name)
	mutated, apiErr := resourceClient(t, c, mapper, input).Create(t.Context(), input.DeepCopy(), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})

	// 5. Compare.
	switch {
	case apiErr != nil && morphErr != "":
		t.Logf("both reject the input.\nAPI server: %v\nmorph: %s", apiErr, strings.TrimSpace(morphErr))
		if !tc.denies {
			t.Errorf("the case says the input is admitted, but both the API server and morph reject it (fix the case)")
		}
		return
	case apiErr != nil:
		stripServerFields(baseline)
		stripServerFields(morphDefaulted)
		t.Fatalf("only the API server rejects the input.\nAPI server: %v\nmorph changed (baseline -> morph output, defaulted by the API server):\n%s\npolicies:\n%s",
			apiErr, formatChanges(jsonDiff(baseline.Object, morphDefaulted.Object)), renderObjects(policies))
	case morphErr != "":
		stripServerFields(baseline)
		stripServerFields(mutated)
		t.Fatalf("only morph rejects the input.\nmorph: %s\nAPI server changed (baseline -> API server mutated):\n%s\npolicies:\n%s",
			strings.TrimSpace(morphErr), formatChanges(jsonDiff(baseline.Object, mutated.Object)), renderObjects(policies))
	case tc.denies:
		t.Errorf("the case says the input is rejected, but both the API server and morph admit it (fix the case)")
	}
	for _, obj := range []*unstructured.Unstructured{baseline, morphDefaulted, mutated} {
		stripServerFields(obj)
	}
	apiChanges := jsonDiff(baseline.Object, mutated.Object)
	morphChanges := jsonDiff(baseline.Object, morphDefaulted.Object)
	t.Logf("API server changed (baseline -> mutated):\n%s", formatChanges(apiChanges))
	if !reflect.DeepEqual(mutated.Object, morphDefaulted.Object) {
		t.Errorf("morph's result differs from the API server's.\n"+
			"API server changed (baseline -> API server mutated):\n%s\n"+
			"morph changed (baseline -> morph output, defaulted by the API server):\n%s\n"+
			"difference (API server mutated -> morph):\n%s\n"+
			"morph output (before defaulting):\n%s",
			formatChanges(apiChanges), formatChanges(morphChanges),
			formatChanges(jsonDiff(mutated.Object, morphDefaulted.Object)), mustYAML(morphOut.Object))
	}
	if changed := len(apiChanges) > 0; changed != tc.mutates {
		t.Errorf("the API server changed the input: %v; the case says mutates: %v (fix the case, or the policy did not run)", changed, tc.mutates)
	}
}

// readObjects reads the YAML documents of path; a missing file is an error if required,
// otherwise no objects.
func readObjects(t *testing.T, path string, required bool) []*unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) && !required {
		return nil
	}
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	var out []*unstructured.Unstructured
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for i := 1; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: document %d: %v", path, i, err)
		}
		jsonDoc, err := yaml.YAMLToJSON(doc)
		if err != nil {
			t.Fatalf("%s: document %d: %v", path, i, err)
		}
		if s := strings.TrimSpace(string(jsonDoc)); s == "null" || s == "" {
			continue // an empty document (comments only)
		}
		obj := &unstructured.Unstructured{}
		if err := obj.UnmarshalJSON(jsonDoc); err != nil {
			t.Fatalf("%s: document %d: %v", path, i, err)
		}
		out = append(out, obj)
	}
	if required && len(out) == 0 {
		t.Fatalf("%s: no objects", path)
	}
	return out
}

// scopePolicies returns copies of the case's policies and bindings made unique to this
// run and confined to the namespace (see TestCELDifferential). Anything else in the file
// is a test data error.
func scopePolicies(t *testing.T, objs []*unstructured.Unstructured, namespace, suffix string) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	for _, o := range objs {
		o = o.DeepCopy()
		if gv := o.GroupVersionKind().GroupVersion(); gv != mapGVR.GroupVersion() {
			t.Fatalf("policy.yaml: %s %q: only %s objects belong here", o.GetKind(), o.GetName(), mapGVR.GroupVersion())
		}
		o.SetName(o.GetName() + "-" + suffix)
		switch o.GetKind() {
		case "MutatingAdmissionPolicy":
		case "MutatingAdmissionPolicyBinding":
			name, _, _ := unstructured.NestedString(o.Object, "spec", "policyName")
			setNested(t, o, name+"-"+suffix, "spec", "policyName")
			appendSelectorTerm(t, o, "namespaceSelector", map[string]any{"key": namespaceNameLabel, "operator": "In", "values": []any{namespace}})
			appendSelectorTerm(t, o, "objectSelector", map[string]any{"key": celProbeObjectLabel, "operator": "DoesNotExist"})
		default:
			t.Fatalf("policy.yaml: %s %q: only MutatingAdmissionPolicies and their bindings belong here", o.GetKind(), o.GetName())
		}
		out = append(out, o)
	}
	return out
}

// appendSelectorTerm adds a matchExpressions term to a binding's
// spec.matchResources.<selector>, creating what is missing.
func appendSelectorTerm(t *testing.T, binding *unstructured.Unstructured, selector string, term map[string]any) {
	t.Helper()
	path := []string{"spec", "matchResources", selector, "matchExpressions"}
	terms, _, err := unstructured.NestedSlice(binding.Object, path...)
	if err != nil {
		t.Fatalf("binding %q: %s: %v", binding.GetName(), strings.Join(path, "."), err)
	}
	setNested(t, binding, append(terms, term), path...)
}

func setNested(t *testing.T, obj *unstructured.Unstructured, value any, path ...string) {
	t.Helper()
	if err := unstructured.SetNestedField(obj.Object, value, path...); err != nil {
		t.Fatalf("%s %q: set %s: %v", obj.GetKind(), obj.GetName(), strings.Join(path, "."), err)
	}
}

// resourceOf finds the resource of obj's kind, and whether it is namespaced.
func resourceOf(t *testing.T, mapper meta.RESTMapper, obj *unstructured.Unstructured) (schema.GroupVersionResource, bool) {
	t.Helper()
	gvk := obj.GroupVersionKind()
	m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		t.Fatalf("%s %q: no resource for %s: %v", obj.GetKind(), obj.GetName(), gvk, err)
	}
	return m.Resource, m.Scope.Name() == meta.RESTScopeNameNamespace
}

func resourceClient(t *testing.T, c *Cluster, mapper meta.RESTMapper, obj *unstructured.Unstructured) dynamic.ResourceInterface {
	t.Helper()
	gvr, namespaced := resourceOf(t, mapper, obj)
	if namespaced {
		return c.Dynamic.Resource(gvr).Namespace(obj.GetNamespace())
	}
	return c.Dynamic.Resource(gvr)
}

// createObject creates obj; cluster-scoped objects are deleted at cleanup (namespaced
// ones go with the namespace).
func createObject(t *testing.T, c *Cluster, mapper meta.RESTMapper, obj *unstructured.Unstructured) {
	t.Helper()
	client := resourceClient(t, c, mapper, obj)
	if _, err := client.Create(t.Context(), obj, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create %s %q: %v", obj.GetKind(), obj.GetName(), err)
	}
	if obj.GetNamespace() != "" {
		return
	}
	t.Cleanup(func() {
		ctx, cancel := cleanupContext()
		defer cancel()
		if err := client.Delete(ctx, obj.GetName(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("cleanup: delete %s %q: %v", obj.GetKind(), obj.GetName(), err)
		}
	})
}

// dryRunCreate creates obj with server-side dry-run (admission runs, nothing is stored)
// and returns what the API server would have stored.
func dryRunCreate(t *testing.T, c *Cluster, mapper meta.RESTMapper, obj *unstructured.Unstructured, what string) *unstructured.Unstructured {
	t.Helper()
	got, err := resourceClient(t, c, mapper, obj).Create(t.Context(), obj.DeepCopy(), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		t.Fatalf("dry-run create of %s (%s %q): %v", what, obj.GetKind(), obj.GetName(), err)
	}
	return got
}

// stripServerFields removes what differs between two creates of the same object.
func stripServerFields(obj *unstructured.Unstructured) {
	for _, f := range []string{"uid", "creationTimestamp", "resourceVersion", "generation", "managedFields"} {
		unstructured.RemoveNestedField(obj.Object, "metadata", f)
	}
}

// runMorph runs `morph apply` on the policies and input with the params and the
// Namespace as context, and returns its output, or its standard error if it exits with
// status 1 (a policy could not be evaluated: the object is rejected). Any other failure
// fails the test.
func runMorph(t *testing.T, morph string, policies []*unstructured.Unstructured, input *unstructured.Unstructured, params []*unstructured.Unstructured, namespace *corev1.Namespace) (*unstructured.Unstructured, string) {
	t.Helper()
	dir := t.TempDir()
	policyDir := filepath.Join(dir, "policies")
	if err := os.Mkdir(policyDir, 0o755); err != nil {
		t.Fatal(err)
	}
	ns := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1",
		"kind":       "Namespace",
		"metadata":   map[string]any{"name": namespace.Name, "labels": stringMap(namespace.Labels)},
	}}
	policyFile := filepath.Join(policyDir, "policy.yaml")
	inputFile := filepath.Join(dir, "input.yaml")
	contextFile := filepath.Join(dir, "context.yaml")
	writeObjects(t, policyFile, policies...)
	writeObjects(t, inputFile, input)
	writeObjects(t, contextFile, append(slices.Clone(params), ns)...)

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	args := []string{"apply", "-p", policyDir, "-f", inputFile, "--context", contextFile, "-n", namespace.Name, "-o", "json"}
	cmd := exec.CommandContext(ctx, morph, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) && exit.ExitCode() == 1 && ctx.Err() == nil {
			return nil, fmt.Sprintf("exit status 1: %s", stderr.String())
		}
		t.Fatalf("morph %s: %v\nstderr:\n%s\npolicies:\n%s", strings.Join(args, " "), err, stderr.String(), renderObjects(policies))
	}
	if stderr.Len() > 0 {
		t.Logf("morph stderr:\n%s", stderr.String())
	}
	out := &unstructured.Unstructured{}
	if err := out.UnmarshalJSON(stdout.Bytes()); err != nil {
		t.Fatalf("morph output is not one object: %v\n%s", err, stdout.String())
	}
	return out, ""
}

func stringMap(m map[string]string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func writeObjects(t *testing.T, path string, objs ...*unstructured.Unstructured) {
	t.Helper()
	if err := os.WriteFile(path, []byte(renderObjects(objs)), 0o644); err != nil {
		t.Fatal(err)
	}
}

// renderObjects renders objects as a multi-document YAML stream.
func renderObjects(objs []*unstructured.Unstructured) string {
	var b strings.Builder
	for i, o := range objs {
		if i > 0 {
			b.WriteString("---\n")
		}
		b.WriteString(mustYAML(o.Object))
	}
	return b.String()
}

func mustYAML(v any) string {
	b, err := yaml.Marshal(v)
	if err != nil {
		return fmt.Sprintf("<cannot render as YAML: %v>", err)
	}
	return string(b)
}

// probeParam is the probe's param ConfigMap in namespace.
func probeParam(namespace string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1",
		"kind":       "ConfigMap",
		"metadata": map[string]any{
			"name":      "celdiff-probe-param",
			"namespace": namespace,
			"labels":    map[string]any{celProbeParamLabel: namespace},
		},
		"data": map[string]any{"token": namespace},
	}}
}

// probePolicies are the probe's policy and binding for namespace.
func probePolicies(namespace string) (policy, binding *unstructured.Unstructured) {
	return paramPolicies("celdiff-probe-"+namespace, celProbeObjectLabel, namespace, namespace,
		map[string]any{"matchLabels": map[string]any{namespaceNameLabel: namespace}})
}

// paramPolicies are a policy and its binding with paramKind ConfigMap: the policy matches
// the CREATE of ConfigMaps labelled objectLabel=value and annotates them with the data
// "token" of the params labelled celProbeParamLabel=paramValue (selected by the binding,
// parameterNotFoundAction Allow). namespaceSelector, if not nil, restricts the binding.
func paramPolicies(name, objectLabel, value, paramValue string, namespaceSelector map[string]any) (policy, binding *unstructured.Unstructured) {
	policy = &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": mapGVR.GroupVersion().String(),
		"kind":       "MutatingAdmissionPolicy",
		"metadata":   map[string]any{"name": name},
		"spec": map[string]any{
			"paramKind": map[string]any{"apiVersion": "v1", "kind": "ConfigMap"},
			"matchConstraints": map[string]any{
				"resourceRules": []any{map[string]any{
					"apiGroups":   []any{""},
					"apiVersions": []any{"v1"},
					"operations":  []any{"CREATE"},
					"resources":   []any{"configmaps"},
				}},
				"objectSelector": map[string]any{"matchLabels": map[string]any{objectLabel: value}},
			},
			"failurePolicy":      "Fail",
			"reinvocationPolicy": "Never",
			"mutations": []any{map[string]any{
				"patchType": "ApplyConfiguration",
				"applyConfiguration": map[string]any{
					"expression": fmt.Sprintf("Object{metadata: Object.metadata{annotations: {%q: params.data.token}}}", celProbeAnnotation),
				},
			}},
		},
	}}
	spec := map[string]any{
		"policyName": name,
		"paramRef": map[string]any{
			"selector":                map[string]any{"matchLabels": map[string]any{celProbeParamLabel: paramValue}},
			"parameterNotFoundAction": "Allow",
		},
	}
	if namespaceSelector != nil {
		spec["matchResources"] = map[string]any{"namespaceSelector": namespaceSelector}
	}
	binding = &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": mapBindingGVR.GroupVersion().String(),
		"kind":       "MutatingAdmissionPolicyBinding",
		"metadata":   map[string]any{"name": name},
		"spec":       spec,
	}}
	return policy, binding
}

// keepConfigMapParamInformer creates, unless they exist, the inert policy and binding
// with paramKind ConfigMap that keep the API server's ConfigMap param informer running.
// They are deliberately left in the cluster (see TestCELDifferential).
func keepConfigMapParamInformer(t *testing.T, c *Cluster, mapper meta.RESTMapper) {
	t.Helper()
	policy, binding := paramPolicies(celParamKeeperName, celParamKeeperLabel, "never-set", "keeper", nil)
	for _, obj := range []*unstructured.Unstructured{policy, binding} {
		_, err := resourceClient(t, c, mapper, obj).Create(t.Context(), obj, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("create %s %q: %v", obj.GetKind(), obj.GetName(), err)
		}
	}
}

// waitForProbe dry-run-creates the probe ConfigMap until the probe policy annotates it.
func waitForProbe(t *testing.T, c *Cluster, namespace string) {
	t.Helper()
	start := time.Now()
	probe := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Name:      "celdiff-probe",
		Namespace: namespace,
		Labels:    map[string]string{celProbeObjectLabel: namespace},
	}}
	Eventually(t, celProbeTimeout, func() error {
		got, err := c.Kube.CoreV1().ConfigMaps(namespace).Create(t.Context(), probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return fmt.Errorf("dry-run create of the probe ConfigMap: %w", err)
		}
		if v := got.Annotations[celProbeAnnotation]; v != namespace {
			return fmt.Errorf("the policies of namespace %s are not active yet: probe annotation %q = %q "+
				"(if this lasts, the API server may have stopped its ConfigMap param informer: "+
				"did an earlier test delete the last policy with paramKind ConfigMap? see TestCELDifferential)",
				namespace, celProbeAnnotation, v)
		}
		return nil
	})
	t.Logf("policies active after %v", time.Since(start).Round(time.Millisecond))
}

// change is one difference between two JSON values, at a JSON Pointer.
type change struct {
	path     string
	from, to any
	// had and has say whether the value exists on either side.
	had, has bool
}

// jsonDiff lists the differences from a to b, sorted by path. Lists are compared element
// by element.
func jsonDiff(a, b any) []change {
	var out []change
	diffInto(&out, "", a, b)
	sort.Slice(out, func(i, j int) bool { return out[i].path < out[j].path })
	return out
}

func diffInto(out *[]change, path string, a, b any) {
	switch x := a.(type) {
	case map[string]any:
		if y, ok := b.(map[string]any); ok {
			for k, av := range x {
				p := path + "/" + escapePointer(k)
				if bv, ok := y[k]; ok {
					diffInto(out, p, av, bv)
				} else {
					*out = append(*out, change{path: p, from: av, had: true})
				}
			}
			for k, bv := range y {
				if _, ok := x[k]; !ok {
					*out = append(*out, change{path: path + "/" + escapePointer(k), to: bv, has: true})
				}
			}
			return
		}
	case []any:
		if y, ok := b.([]any); ok {
			for i := 0; i < max(len(x), len(y)); i++ {
				p := fmt.Sprintf("%s/%d", path, i)
				switch {
				case i >= len(y):
					*out = append(*out, change{path: p, from: x[i], had: true})
				case i >= len(x):
					*out = append(*out, change{path: p, to: y[i], has: true})
				default:
					diffInto(out, p, x[i], y[i])
				}
			}
			return
		}
	}
	if !reflect.DeepEqual(a, b) {
		*out = append(*out, change{path: path, from: a, to: b, had: true, has: true})
	}
}

func escapePointer(key string) string {
	return strings.ReplaceAll(strings.ReplaceAll(key, "~", "~0"), "/", "~1")
}

func formatChanges(cs []change) string {
	if len(cs) == 0 {
		return "  (nothing)"
	}
	var b strings.Builder
	for i, c := range cs {
		if i > 0 {
			b.WriteByte('\n')
		}
		switch {
		case !c.had:
			fmt.Fprintf(&b, "  + %s: %s", c.path, compactJSON(c.to))
		case !c.has:
			fmt.Fprintf(&b, "  - %s: %s", c.path, compactJSON(c.from))
		default:
			fmt.Fprintf(&b, "  ~ %s: %s -> %s", c.path, compactJSON(c.from), compactJSON(c.to))
		}
	}
	return b.String()
}

func compactJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("%v", v)
	}
	return string(b)
}
