package e2e

import (
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/morph-dev/morph/internal/dialect/cel"
	"github.com/morph-dev/morph/internal/dialect/gatekeeper"
	"github.com/morph-dev/morph/internal/dialect/katalog"
	"github.com/morph-dev/morph/internal/objects"
	"github.com/morph-dev/morph/internal/policy"
	"github.com/morph-dev/morph/internal/webhook"
)

// serveTestdata is the folder of the policies, CRDs and context objects of the
// morph serve tests.
var serveTestdata = filepath.Join("testdata", "serve")

// serveWebsiteGVR is spec 000's Website resource.
var serveWebsiteGVR = schema.GroupVersionResource{Group: "demo.orkestra.io", Version: "v1alpha1", Resource: "websites"}

// serveLoader builds the loader of every dialect morph reads, as cmd/morph's
// newDialects does with its default options (no mutation annotations, no external
// data, no HTTP hosts).
func serveLoader(store *objects.Store) *policy.Loader {
	return policy.NewLoader(
		gatekeeper.New(gatekeeper.Options{Objects: store}),
		cel.New(cel.Options{Objects: store}),
		katalog.New(katalog.Options{Objects: store}),
	)
}

// servedMorph is morph's webhook server for one test, served by StartWebhookServer.
type servedMorph struct {
	server *webhook.Server
	url    string
	caPEM  []byte
	bundle *policy.Bundle
}

// startServedMorph loads the policies at path (a file or a folder) with the context
// objects at contexts, through every dialect, and serves them with morph's webhook
// server (admission and conversion) until the test ends.
func startServedMorph(t *testing.T, path string, contexts ...string) *servedMorph {
	t.Helper()
	source := &webhook.FolderSource{Policies: path, Context: contexts, NewLoader: serveLoader}
	server, err := webhook.New(webhook.Options{
		Source:     source,
		Admission:  true,
		Conversion: true,
		Logger:     slog.New(slog.NewTextHandler(serveTestLog{t}, &slog.HandlerOptions{Level: slog.LevelInfo})),
	})
	if err != nil {
		t.Fatalf("morph webhook server: %v", err)
	}
	if err := server.Reload(); err != nil {
		t.Fatalf("morph webhook server: loading %s: %v", path, err)
	}
	snap, err := source.Load()
	if err != nil {
		t.Fatalf("loading %s: %v", path, err)
	}
	for _, n := range snap.Notes {
		t.Logf("policy note: %s", n)
	}
	url, caPEM := StartWebhookServer(t, server.Handler())
	return &servedMorph{server: server, url: url, caPEM: caPEM, bundle: snap.Bundle}
}

// register creates the webhook configurations morph generates for the served policies,
// each webhook narrowed to namespace so that other tests sharing the cluster are not
// affected, and returns them as generated (nil when morph generates none).
func (m *servedMorph) register(t *testing.T, name, namespace string) (*admissionregistrationv1.MutatingWebhookConfiguration, *admissionregistrationv1.ValidatingWebhookConfiguration) {
	t.Helper()
	mutating, validating, err := webhook.Configurations(m.bundle, webhook.ConfigOptions{
		Name: name, Namespace: "morph-system", URL: m.url, CABundle: m.caPEM,
	})
	if err != nil {
		t.Fatalf("generating the webhook configurations: %v", err)
	}
	if mutating != nil {
		narrowed := mutating.DeepCopy()
		for i := range narrowed.Webhooks {
			narrowed.Webhooks[i].NamespaceSelector = serveNarrow(narrowed.Webhooks[i].NamespaceSelector, namespace)
		}
		CreateMutatingWebhookConfiguration(t, narrowed)
	}
	if validating != nil {
		narrowed := validating.DeepCopy()
		for i := range narrowed.Webhooks {
			narrowed.Webhooks[i].NamespaceSelector = serveNarrow(narrowed.Webhooks[i].NamespaceSelector, namespace)
		}
		CreateValidatingWebhookConfiguration(t, narrowed)
	}
	return mutating, validating
}

// serveNarrow adds "the namespace is namespace" to a generated namespaceSelector.
func serveNarrow(sel *metav1.LabelSelector, namespace string) *metav1.LabelSelector {
	out := &metav1.LabelSelector{}
	if sel != nil {
		out = sel.DeepCopy()
	}
	out.MatchExpressions = append(out.MatchExpressions, metav1.LabelSelectorRequirement{
		Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpIn, Values: []string{namespace},
	})
	return out
}

// serveTestLog sends the server's log lines to the test log.
type serveTestLog struct{ t *testing.T }

func (l serveTestLog) Write(p []byte) (int, error) {
	l.t.Log("morph: " + strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// serveReadYAML decodes the YAML file at path into out.
func serveReadYAML(t *testing.T, path string, out any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(data, out); err != nil {
		t.Fatalf("decoding %s: %v", path, err)
	}
}

// serveCRD reads a CRD from the serve testdata.
func serveCRD(t *testing.T, path string) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	crd := &apiextensionsv1.CustomResourceDefinition{}
	serveReadYAML(t, path, crd)
	return crd
}

// serveWarnings records the API server's warnings (rest.WarningHandler).
type serveWarnings struct {
	mu   sync.Mutex
	list []string
}

func (w *serveWarnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.list = append(w.list, text)
}

// take returns the warnings recorded since the last take.
func (w *serveWarnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.list
	w.list = nil
	return out
}

// serveWebhookRules lists a configuration's rules as "group/version/resource ops".
func serveWebhookRules(rules []admissionregistrationv1.RuleWithOperations) []string {
	var out []string
	for _, r := range rules {
		for _, g := range r.APIGroups {
			for _, v := range r.APIVersions {
				for _, res := range r.Resources {
					out = append(out, fmt.Sprintf("%s/%s/%s %v", g, v, res, r.Operations))
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

// TestServeCEL serves a MutatingAdmissionPolicy with its binding and Kyverno
// MutatingPolicies with morph (they are not installed in the API server: morph
// evaluates them) and checks that the API server stores the Pods and ConfigMaps they
// mutate, on CREATE and UPDATE, with match conditions and a Kyverno library function.
func TestServeCEL(t *testing.T) {
	c := Current(t)
	ns := CreateNamespace(t, "e2e-serve-cel-", nil)
	m := startServedMorph(t, filepath.Join(serveTestdata, "cel", "policies.yaml"))
	if got := len(m.bundle.Mutators); got != 3 {
		t.Fatalf("compiled %d mutators, want 3 (the policy with its binding, two MutatingPolicies)", got)
	}
	mutating, validating := m.register(t, "e2e-serve-cel", ns.Name)
	if mutating == nil || validating != nil {
		t.Fatalf("configurations: mutating %v, validating %v; want only a mutating one", mutating != nil, validating != nil)
	}
	var rules []string
	for _, w := range mutating.Webhooks {
		rules = append(rules, serveWebhookRules(w.Rules)...)
	}
	slices.Sort(rules)
	// matchPolicy Equivalent (the default) reaches every version of the resources; the
	// Kyverno Pod policy reaches the pod controllers too (Kyverno's autogen is on by
	// default).
	if got, want := slices.Compact(rules), []string{"/*/configmaps [CREATE UPDATE]", "/*/pods [CREATE]",
		"apps/v1/daemonsets [CREATE]", "apps/v1/deployments [CREATE]", "apps/v1/replicasets [CREATE]", "apps/v1/statefulsets [CREATE]",
		"batch/v1/cronjobs [CREATE]", "batch/v1/jobs [CREATE]"}; !reflect.DeepEqual(got, want) {
		t.Errorf("webhook rules %q, want %q", got, want)
	}

	pods := c.Kube.CoreV1().Pods(ns.Name)
	newPod := func(name string, labels map[string]string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: map[string]string{"e2e.morph.dev/note": "kept"}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}}},
		}
	}
	if _, err := pods.Create(t.Context(), newPod("web", map[string]string{"app": "web"}), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create Pod web: %v", err)
	}
	if _, err := pods.Create(t.Context(), newPod("opted-out", map[string]string{"e2e.morph.dev/opt-out": "true"}), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create Pod opted-out: %v", err)
	}
	for _, tc := range []struct {
		name        string
		labels      map[string]string
		annotations map[string]string
	}{{
		name:   "web",
		labels: map[string]string{"app": "web", "cel.e2e.morph.dev/map": "bound"},
		annotations: map[string]string{
			"e2e.morph.dev/note":            "kept",
			"cel.e2e.morph.dev/first-image": "registry.k8s.io/pause:3.10",
			"cel.e2e.morph.dev/registry":    "registry.k8s.io",
		},
	}, {
		// The MutatingAdmissionPolicy's match condition excludes it; the Kyverno
		// policy still applies.
		name:   "opted-out",
		labels: map[string]string{"e2e.morph.dev/opt-out": "true"},
		annotations: map[string]string{
			"e2e.morph.dev/note":         "kept",
			"cel.e2e.morph.dev/registry": "registry.k8s.io",
		},
	}} {
		stored, err := pods.Get(t.Context(), tc.name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("get Pod %s: %v", tc.name, err)
		}
		if !maps.Equal(stored.Labels, tc.labels) || !maps.Equal(stored.Annotations, tc.annotations) {
			t.Errorf("stored Pod %s: labels %v, annotations %v; want labels %v, annotations %v", tc.name, stored.Labels, stored.Annotations, tc.labels, tc.annotations)
		}
		if len(stored.Spec.Containers) != 1 || stored.Spec.Containers[0].Image != "registry.k8s.io/pause:3.10" {
			t.Errorf("stored Pod %s: containers %+v, want the one container unchanged", tc.name, stored.Spec.Containers)
		}
	}

	configMaps := c.Kube.CoreV1().ConfigMaps(ns.Name)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings"}, Data: map[string]string{"k": "v"}}
	if _, err := configMaps.Create(t.Context(), cm, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create ConfigMap: %v", err)
	}
	stored, err := configMaps.Get(t.Context(), "settings", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get ConfigMap: %v", err)
	}
	wantLabels := map[string]string{"cel.e2e.morph.dev/owner": "platform"}
	if !maps.Equal(stored.Labels, wantLabels) || !maps.Equal(stored.Data, map[string]string{"k": "v", "kyverno": "mutated"}) {
		t.Errorf("stored ConfigMap: labels %v, data %v; want labels %v, data k=v kyverno=mutated", stored.Labels, stored.Data, wantLabels)
	}
	// The MutatingPolicy runs on UPDATE too: removing its key brings it back.
	stored.Data = map[string]string{"k": "v2"}
	if _, err := configMaps.Update(t.Context(), stored, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update ConfigMap: %v", err)
	}
	updated, err := configMaps.Get(t.Context(), "settings", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get ConfigMap: %v", err)
	}
	if !maps.Equal(updated.Data, map[string]string{"k": "v2", "kyverno": "mutated"}) {
		t.Errorf("updated ConfigMap data %v, want k=v2 kyverno=mutated", updated.Data)
	}
}

// serveWebsite is a Website object in namespace.
func serveWebsite(namespace, name string, labels map[string]any, spec map[string]any) *unstructured.Unstructured {
	meta := map[string]any{"name": name, "namespace": namespace}
	if labels != nil {
		meta["labels"] = labels
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": serveWebsiteGVR.GroupVersion().String(),
		"kind":       "Website",
		"metadata":   meta,
		"spec":       spec,
	}}
}

// serveCheckWebsite compares the stored spec and labels of a Website with the wanted ones,
// types included (replicas and port must be stored as integers).
func serveCheckWebsite(t *testing.T, what string, got *unstructured.Unstructured, wantLabels map[string]string, wantSpec map[string]any) {
	t.Helper()
	spec, _, _ := unstructured.NestedMap(got.Object, "spec")
	if !reflect.DeepEqual(spec, wantSpec) {
		t.Errorf("%s: spec %#v, want %#v", what, spec, wantSpec)
	}
	if !maps.Equal(got.GetLabels(), wantLabels) {
		t.Errorf("%s: labels %v, want %v", what, got.GetLabels(), wantLabels)
	}
}

// TestServeKatalogDefaults serves the Katalog of spec 000's complete example with
// morph, with the Website CRD as context so that template values are typed by its
// schema, and checks that the API server stores Websites with the defaults (replicas 2
// and port 8080 as integers, logLevel info), the image override and the managed-by
// label, on CREATE and UPDATE.
func TestServeKatalogDefaults(t *testing.T) {
	c := Current(t)
	ns := CreateNamespace(t, "e2e-serve-katalog-", nil)
	crdPath := filepath.Join(serveTestdata, "website", "crd.yaml")
	CreateCRD(t, serveCRD(t, crdPath))
	m := startServedMorph(t, filepath.Join(serveTestdata, "website", "katalog.yaml"), crdPath)
	mutating, validating := m.register(t, "e2e-serve-katalog", ns.Name)
	if mutating == nil || validating != nil {
		t.Fatalf("configurations: mutating %v, validating %v; want only a mutating one", mutating != nil, validating != nil)
	}
	if len(mutating.Webhooks) != 1 {
		t.Fatalf("%d mutating webhooks, want 1", len(mutating.Webhooks))
	}
	w := mutating.Webhooks[0]
	if got, want := serveWebhookRules(w.Rules), []string{"demo.orkestra.io/v1alpha1/websites [CREATE UPDATE]"}; !reflect.DeepEqual(got, want) {
		t.Errorf("webhook rules %q, want %q", got, want)
	}
	// Spec 000: mutation never blocks admission.
	if w.FailurePolicy == nil || *w.FailurePolicy != admissionregistrationv1.Ignore {
		t.Errorf("failurePolicy %v, want Ignore", w.FailurePolicy)
	}

	websites := c.Dynamic.Resource(serveWebsiteGVR).Namespace(ns.Name)
	if _, err := websites.Create(t.Context(), serveWebsite(ns.Name, "my-site", map[string]any{"app": "web"}, map[string]any{"version": "1.4", "image": "nginx"}), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create Website my-site: %v", err)
	}
	stored, err := websites.Get(t.Context(), "my-site", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get Website my-site: %v", err)
	}
	serveCheckWebsite(t, "stored my-site", stored, map[string]string{"app": "web", "managed-by": "orkestra"}, map[string]any{
		"replicas": int64(2), "logLevel": "info", "port": int64(8080),
		"image": "registry.myorg.io/my-site:1.4", "version": "1.4",
	})

	// Values present are kept; a missing version gives the template's "latest".
	if _, err := websites.Create(t.Context(), serveWebsite(ns.Name, "blog", nil, map[string]any{"replicas": int64(5), "port": int64(9090), "logLevel": "warn"}), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create Website blog: %v", err)
	}
	blog, err := websites.Get(t.Context(), "blog", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get Website blog: %v", err)
	}
	serveCheckWebsite(t, "stored blog", blog, map[string]string{"managed-by": "orkestra"}, map[string]any{
		"replicas": int64(5), "logLevel": "warn", "port": int64(9090), "image": "registry.myorg.io/blog:latest",
	})

	// UPDATE is among the operations: removing a defaulted field brings the default
	// back, and the override wins over a changed image.
	if err := unstructured.SetNestedField(stored.Object, "nginx:latest", "spec", "image"); err != nil {
		t.Fatal(err)
	}
	unstructured.RemoveNestedField(stored.Object, "spec", "replicas")
	if _, err := websites.Update(t.Context(), stored, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update Website my-site: %v", err)
	}
	updated, err := websites.Get(t.Context(), "my-site", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get Website my-site: %v", err)
	}
	serveCheckWebsite(t, "updated my-site", updated, map[string]string{"app": "web", "managed-by": "orkestra"}, map[string]any{
		"replicas": int64(2), "logLevel": "info", "port": int64(8080),
		"image": "registry.myorg.io/my-site:1.4", "version": "1.4",
	})
}

// TestServeKatalogValidation serves spec 000's Katalog with validation rules with
// morph and registers both configurations morph generates: a Website with replicas 0
// is refused by /validate with the rule's message, a warn rule's message comes back as
// an API warning, and a valid Website is admitted without warnings.
func TestServeKatalogValidation(t *testing.T) {
	c := Current(t)
	ns := CreateNamespace(t, "e2e-serve-validate-", nil)
	crdPath := filepath.Join(serveTestdata, "website", "crd.yaml")
	CreateCRD(t, serveCRD(t, crdPath))
	m := startServedMorph(t, filepath.Join(serveTestdata, "website-validation", "katalog.yaml"), crdPath)
	mutating, validating := m.register(t, "e2e-serve-validate", ns.Name)
	if mutating == nil || validating == nil {
		t.Fatalf("configurations: mutating %v, validating %v; want both", mutating != nil, validating != nil)
	}
	for _, w := range validating.Webhooks {
		if w.ClientConfig.URL == nil || !strings.HasPrefix(*w.ClientConfig.URL, m.url+"/validate/") {
			t.Errorf("validating webhook %s calls %v, want %s/validate/<group>", w.Name, w.ClientConfig.URL, m.url)
		}
		if got, want := serveWebhookRules(w.Rules), []string{"demo.orkestra.io/v1alpha1/websites [CREATE UPDATE]"}; !reflect.DeepEqual(got, want) {
			t.Errorf("validating webhook %s: rules %q, want %q", w.Name, got, want)
		}
	}

	warnings := &serveWarnings{}
	cfg := c.Config()
	cfg.WarningHandler = warnings
	client, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	websites := client.Resource(serveWebsiteGVR).Namespace(ns.Name)

	// Denied: mutation runs first, and 0 is a value, so no default replaces it.
	_, err = websites.Create(t.Context(), serveWebsite(ns.Name, "empty", nil, map[string]any{"replicas": int64(0)}), metav1.CreateOptions{})
	if err == nil {
		t.Fatal("a Website with replicas 0 was admitted, want it denied")
	}
	if !strings.Contains(err.Error(), "replicas must be at least 1") || !apierrors.IsForbidden(err) {
		t.Errorf("create with replicas 0: %v (forbidden %v); want a 403 carrying %q", err, apierrors.IsForbidden(err), "replicas must be at least 1")
	}
	if _, err := websites.Get(t.Context(), "empty", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("get the denied Website: %v, want not found", err)
	}
	warnings.take()

	// Warned, and admitted with the mutations.
	if _, err := websites.Create(t.Context(), serveWebsite(ns.Name, "chatty", nil, map[string]any{"replicas": int64(3), "logLevel": "debug"}), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create Website chatty: %v", err)
	}
	got := warnings.take()
	if !slices.ContainsFunc(got, func(w string) bool { return strings.Contains(w, "logLevel should be info, warn or error") }) {
		t.Errorf("warnings %q, want one carrying %q", got, "logLevel should be info, warn or error")
	}
	chatty, err := websites.Get(t.Context(), "chatty", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get Website chatty: %v", err)
	}
	serveCheckWebsite(t, "stored chatty", chatty, map[string]string{"managed-by": "orkestra"}, map[string]any{
		"replicas": int64(3), "logLevel": "debug", "port": int64(8080), "image": "registry.myorg.io/chatty:latest",
	})
	warnings.take()

	// Valid after the defaults: admitted without warnings.
	if _, err := websites.Create(t.Context(), serveWebsite(ns.Name, "quiet", nil, map[string]any{"version": "2.0"}), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create Website quiet: %v", err)
	}
	if got := warnings.take(); len(got) != 0 {
		t.Errorf("warnings for a valid Website: %q, want none", got)
	}

	// UPDATE is validated too.
	quiet, err := websites.Get(t.Context(), "quiet", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get Website quiet: %v", err)
	}
	if err := unstructured.SetNestedField(quiet.Object, int64(0), "spec", "replicas"); err != nil {
		t.Fatal(err)
	}
	if _, err := websites.Update(t.Context(), quiet, metav1.UpdateOptions{}); err == nil || !strings.Contains(err.Error(), "replicas must be at least 1") {
		t.Errorf("update to replicas 0: %v, want denied with %q", err, "replicas must be at least 1")
	}
}
