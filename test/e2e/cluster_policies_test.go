package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"
)

// clusterTimeout bounds each wait of TestClusterPolicies for morph to see a change.
const clusterTimeout = 20 * time.Second

var (
	assignGVR  = schema.GroupVersionResource{Group: "mutations.gatekeeper.sh", Version: "v1", Resource: "assign"}
	mpolGVR    = schema.GroupVersionResource{Group: "policies.kyverno.io", Version: "v1", Resource: "mutatingpolicies"}
	katalogGVR = schema.GroupVersionResource{Group: "orkestra.orkspace.io", Version: "v1", Resource: "katalogs"}
	gadgetGVR  = schema.GroupVersionResource{Group: "cluster.e2e.morph.dev", Version: "v1", Resource: "gadgets"}
)

// TestClusterPolicies runs morph serve in cluster mode (--kubeconfig, --leader-elect=false)
// against the real API server, with the CRDs morph generate crds prints, and policies of
// the three dialects created through the API:
//
//   - each policy's status says Ready=True; Pods, ConfigMaps and a custom resource are
//     mutated; the Katalog default is an Event on the custom resource;
//   - a changed Assign mutates with its new value;
//   - a broken MutatingPolicy reports Ready=False with the loader's located message and
//     a Warning Event, while the Assign still mutates;
//   - a deleted Assign mutates no more.
func TestClusterPolicies(t *testing.T) {
	c := Current(t)
	bin := serveBuildMorph(t)

	// The CRDs, as printed.
	for _, crd := range clusterDecodeCRDs(t, serveRunMorph(t, bin, "generate", "crds")) {
		if _, err := c.APIExtensions.ApiextensionsV1().CustomResourceDefinitions().Get(t.Context(), crd.Name, metav1.GetOptions{}); err == nil {
			t.Fatalf("CRD %s already exists: another test installed it", crd.Name)
		}
		if crd.Name == "katalogs.orkestra.orkspace.io" {
			// As if another tool had installed it: morph must use it and say so.
			crd.Labels = map[string]string{"app.kubernetes.io/managed-by": "orkestra"}
		}
		CreateCRD(t, crd)
	}
	CreateCRD(t, serveCRD(t, filepath.Join("testdata", "cluster", "gadget-crd.yaml")))
	ns := CreateNamespace(t, "e2e-cluster-", nil)
	// morph registers its own configurations too (named morph): removed at the end.
	deleteClusterConfigs(t)

	certDir := t.TempDir()
	var addr string
	var p *serveProcess
	var client *serveClient
	for try := 1; ; try++ {
		addr = serveFreeAddr(t)
		p = serveStart(t, bin, "serve", "--kubeconfig", c.KubeconfigPath(), "--leader-elect=false",
			"--cert-dir", certDir, "--addr", addr, "--webhook-url", "https://"+addr, "--log-level", "debug")
		var err error
		if client, err = serveAwaitReady(p, addr, certDir); err == nil {
			break
		} else if try >= serveStartTries || !p.log.contains("address already in use") {
			t.Fatalf("morph serve --kubeconfig: %v\n%s", err, p.log)
		}
	}
	ca, err := os.ReadFile(filepath.Join(certDir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	// Registration is the leader's job (the other half of issue 12); here the test
	// registers morph for the three kinds, in the test's namespace only.
	url := "https://" + addr + "/mutate"
	fail := admissionregistrationv1.Fail
	none := admissionregistrationv1.SideEffectClassNone
	rule := func(group, version, resource string) admissionregistrationv1.RuleWithOperations {
		return admissionregistrationv1.RuleWithOperations{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
			Rule:       admissionregistrationv1.Rule{APIGroups: []string{group}, APIVersions: []string{version}, Resources: []string{resource}},
		}
	}
	CreateMutatingWebhookConfiguration(t, &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-cluster-policies"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:                    "mutate.cluster.e2e.morph.dev",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: ca},
			Rules:                   []admissionregistrationv1.RuleWithOperations{rule("", "v1", "pods"), rule("", "v1", "configmaps"), rule("cluster.e2e.morph.dev", "v1", "gadgets")},
			FailurePolicy:           &fail,
			SideEffects:             &none,
			AdmissionReviewVersions: []string{"v1"},
			NamespaceSelector:       serveNarrow(nil, ns.Name),
		}},
	})

	// The policies, through the API.
	data, err := os.ReadFile(filepath.Join("testdata", "cluster", "policies.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, obj := range clusterDecode(t, bytes.ReplaceAll(data, []byte("NAMESPACE"), []byte(ns.Name))) {
		gvr := map[string]schema.GroupVersionResource{"Assign": assignGVR, "MutatingPolicy": mpolGVR, "Katalog": katalogGVR}[obj.GetKind()]
		if _, err := c.Dynamic.Resource(gvr).Create(t.Context(), obj, metav1.CreateOptions{FieldValidation: "Strict"}); err != nil {
			t.Fatalf("create %s %s: %v", obj.GetKind(), obj.GetName(), err)
		}
		if obj.GetKind() == "Assign" {
			// The Assign alone (first in the file) names its namespace, without a
			// selector: morph watches no Namespaces for it.
			clusterAwaitReady(t, c.Dynamic.Resource(gvr), obj.GetName(), "True", "")
			if informers := clusterContextInformers(t, client, addr); slices.Contains(informers, "namespaces/v1") {
				t.Errorf("with only an Assign without namespaceSelector loaded, morph watches %v; want no Namespaces", informers)
			}
		}
		t.Cleanup(func() {
			ctx, cancel := cleanupContext()
			defer cancel()
			if err := c.Dynamic.Resource(gvr).Delete(ctx, obj.GetName(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("cleanup: delete %s %s: %v", obj.GetKind(), obj.GetName(), err)
			}
		})
	}
	for gvr, name := range map[schema.GroupVersionResource]string{
		assignGVR: "e2e-cluster-configmap-team", mpolGVR: "e2e-cluster-pod-label", katalogGVR: "e2e-cluster-gadgets",
	} {
		clusterAwaitReady(t, c.Dynamic.Resource(gvr), name, "True", "")
	}

	// The MutatingPolicy's namespaceSelector: now morph watches Namespaces.
	clusterAwait(t, "a Namespace informer for the MutatingPolicy's namespaceSelector", func() error {
		if informers := clusterContextInformers(t, client, addr); !slices.Contains(informers, "namespaces/v1") {
			return fmt.Errorf("context informers %v", informers)
		}
		return nil
	})

	// Objects of each kind are mutated.
	seq := 0
	configMapTeam := func() (string, error) {
		seq++
		cm, err := c.Kube.CoreV1().ConfigMaps(ns.Name).Create(t.Context(), &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", seq)},
			Data:       map[string]string{"app": "x"},
		}, metav1.CreateOptions{})
		if err != nil {
			return "", err
		}
		return cm.Data["team"], nil
	}
	clusterAwait(t, "a ConfigMap mutated by the Assign", func() error {
		if team, err := configMapTeam(); err != nil || team != "gatekeeper-v1" {
			return fmt.Errorf("data.team %q, error %v", team, err)
		}
		return nil
	})
	podSeq := 0
	podLabel := func() (string, error) {
		podSeq++
		pod, err := c.Kube.CoreV1().Pods(ns.Name).Create(t.Context(), &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pod-%d", podSeq)},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}},
		}, metav1.CreateOptions{})
		if err != nil {
			return "", err
		}
		return pod.Labels["cluster.e2e.morph.dev/kyverno"], nil
	}
	clusterAwait(t, "a Pod mutated by the MutatingPolicy", func() error {
		if l, err := podLabel(); err != nil || l != "mutated" {
			return fmt.Errorf("label %q, error %v", l, err)
		}
		return nil
	})
	gadget := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "cluster.e2e.morph.dev/v1", "kind": "Gadget",
		"metadata": map[string]any{"name": "g1", "namespace": ns.Name},
		"spec":     map[string]any{"color": "blue"},
	}}
	got, err := c.Dynamic.Resource(gadgetGVR).Namespace(ns.Name).Create(t.Context(), gadget, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r, _, _ := unstructured.NestedFieldNoCopy(got.Object, "spec", "replicas"); fmt.Sprint(r) != "2" {
		t.Errorf("Gadget spec.replicas = %v, want the Katalog default 2", r)
	}
	clusterAwait(t, "the Katalog's Event on the Gadget", func() error {
		return clusterEvent(t, ns.Name, "Gadget", "g1", "GadgetMutation", "defaults applied")
	})

	// The Katalog CRD of another owner is used as it is.
	if !p.log.contains("using an existing CustomResourceDefinition that morph did not install") || !p.log.contains("owner=orkestra") {
		t.Errorf("morph did not say it uses the Katalog CRD of another owner:\n%s", p.log)
	}
	if crd, err := c.APIExtensions.ApiextensionsV1().CustomResourceDefinitions().Get(t.Context(), "katalogs.orkestra.orkspace.io", metav1.GetOptions{}); err != nil {
		t.Error(err)
	} else if crd.Labels["app.kubernetes.io/managed-by"] != "orkestra" {
		t.Errorf("the Katalog CRD's labels changed: %v", crd.Labels)
	}

	// A changed Assign mutates with its new value.
	assigns := c.Dynamic.Resource(assignGVR)
	clusterUpdate(t, assigns, "e2e-cluster-configmap-team", func(o *unstructured.Unstructured) {
		_ = unstructured.SetNestedField(o.Object, "gatekeeper-v2", "spec", "parameters", "assign", "value")
	})
	clusterAwait(t, "a ConfigMap mutated by the changed Assign", func() error {
		if team, err := configMapTeam(); err != nil || team != "gatekeeper-v2" {
			return fmt.Errorf("data.team %q, error %v", team, err)
		}
		return nil
	})

	// A broken MutatingPolicy says why in its status; the Assign still works.
	mpols := c.Dynamic.Resource(mpolGVR)
	clusterUpdate(t, mpols, "e2e-cluster-pod-label", func(o *unstructured.Unstructured) {
		muts, _, _ := unstructured.NestedSlice(o.Object, "spec", "mutations")
		m := muts[0].(map[string]any)
		m["applyConfiguration"] = map[string]any{"expression": "Object{metadata: "}
		_ = unstructured.SetNestedSlice(o.Object, muts, "spec", "mutations")
	})
	msg := clusterAwaitReady(t, mpols, "e2e-cluster-pod-label", "False", "CompileError")
	if !strings.HasPrefix(msg, `mutatingpolicies.policies.kyverno.io/e2e-cluster-pod-label: document 1 (MutatingPolicy "e2e-cluster-pod-label"): spec.mutations[0].applyConfiguration.expression`) {
		t.Errorf("Ready=False message %q does not locate the broken expression", msg)
	}
	clusterAwait(t, "the compile error's Event on the MutatingPolicy", func() error {
		return clusterEvent(t, "default", "MutatingPolicy", "e2e-cluster-pod-label", "CompileError", "spec.mutations[0]")
	})
	clusterAwaitReady(t, assigns, "e2e-cluster-configmap-team", "True", "")
	if team, err := configMapTeam(); err != nil || team != "gatekeeper-v2" {
		t.Errorf("with the MutatingPolicy broken, a new ConfigMap has data.team %q (error %v), want gatekeeper-v2", team, err)
	}

	// morph's own registration (configuration morph) sends ConfigMaps to morph for the
	// Assign, and Gadgets for the Katalog (Pods not: the MutatingPolicy is broken).
	registered := func() ([]string, error) {
		m, err := getMorphMutating(t)
		if err != nil {
			return nil, err
		}
		return mutatingResources(m), nil
	}
	mutateURL := "https://" + addr + "/mutate"
	clusterAwait(t, "morph's registration of ConfigMaps and Gadgets", func() error {
		if got, err := registered(); err != nil || !slices.Equal(got, []string{"configmaps@" + mutateURL, "gadgets@" + mutateURL}) {
			return fmt.Errorf("registered %v, error %v", got, err)
		}
		return nil
	})

	// A deleted Assign mutates no more, and the rules narrow.
	if err := assigns.Delete(t.Context(), "e2e-cluster-configmap-team", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	clusterAwait(t, "a ConfigMap no longer mutated", func() error {
		if team, err := configMapTeam(); err != nil || team != "" {
			return fmt.Errorf("data.team %q, error %v", team, err)
		}
		return nil
	})
	clusterAwait(t, "the rules narrowed to Gadgets after the Assign's deletion", func() error {
		if got, err := registered(); err != nil || !slices.Equal(got, []string{"gadgets@" + mutateURL}) {
			return fmt.Errorf("registered %v, error %v", got, err)
		}
		return nil
	})
}

// clusterContextInformers lists the resources of morph's context informers, from its
// metric morph_cluster_context_informers (resource/version or resource.group/version).
func clusterContextInformers(t *testing.T, client *serveClient, addr string) []string {
	t.Helper()
	resp, err := client.http.Get("https://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("/metrics: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("/metrics: %v", err)
	}
	var out []string
	for line := range strings.Lines(string(body)) {
		rest, ok := strings.CutPrefix(line, `morph_cluster_context_informers{resource="`)
		if !ok {
			continue
		}
		if resource, _, ok := strings.Cut(rest, `"`); ok {
			out = append(out, resource)
		}
	}
	slices.Sort(out)
	return out
}

func clusterDecode(t *testing.T, data []byte) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return out
			}
			t.Fatalf("decode: %v", err)
		}
		if len(m) > 0 {
			out = append(out, &unstructured.Unstructured{Object: m})
		}
	}
}

func clusterDecodeCRDs(t *testing.T, data []byte) []*apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	var out []*apiextensionsv1.CustomResourceDefinition
	for _, u := range clusterDecode(t, data) {
		raw, err := yaml.Marshal(u.Object)
		if err != nil {
			t.Fatal(err)
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(raw, crd); err != nil {
			t.Fatalf("morph generate crds printed something that is not a CRD: %v", err)
		}
		out = append(out, crd)
	}
	if len(out) != 10 {
		t.Fatalf("morph generate crds printed %d CRDs, want 10 (the policy kinds and BackgroundRequest)", len(out))
	}
	return out
}

func clusterAwait(t *testing.T, what string, fn func() error) {
	t.Helper()
	start := time.Now()
	if err := poll(t.Context(), clusterTimeout, fn); err != nil {
		t.Fatalf("%s: not within %v: %v", what, clusterTimeout, err)
	}
	t.Logf("%s after %v", what, time.Since(start).Round(time.Millisecond))
}

// clusterAwaitReady waits until the policy's Ready condition has status (and reason,
// when given) for its current generation, and returns the condition's message.
func clusterAwaitReady(t *testing.T, ri dynamic.ResourceInterface, name, status, reason string) string {
	t.Helper()
	var message string
	clusterAwait(t, fmt.Sprintf("%s Ready=%s", name, status), func() error {
		o, err := ri.Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		observed, _, _ := unstructured.NestedInt64(o.Object, "status", "observedGeneration")
		conds, _, _ := unstructured.NestedSlice(o.Object, "status", "conditions")
		for _, c := range conds {
			m, _ := c.(map[string]any)
			if m["type"] != "Ready" {
				continue
			}
			message, _ = m["message"].(string)
			if m["status"] != status || (reason != "" && m["reason"] != reason) || observed != o.GetGeneration() {
				return fmt.Errorf("Ready %v reason %v observedGeneration %d (generation %d): %s", m["status"], m["reason"], observed, o.GetGeneration(), message)
			}
			return nil
		}
		return fmt.Errorf("no Ready condition yet")
	})
	t.Logf("%s: Ready=%s %s", name, status, message)
	return message
}

func clusterUpdate(t *testing.T, ri dynamic.ResourceInterface, name string, change func(*unstructured.Unstructured)) {
	t.Helper()
	clusterAwait(t, "update "+name, func() error {
		o, err := ri.Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		change(o)
		_, err = ri.Update(t.Context(), o, metav1.UpdateOptions{})
		return err
	})
}

// clusterEvent finds an Event on the object with the reason and a message containing text.
func clusterEvent(t *testing.T, namespace, kind, name, reason, text string) error {
	events, err := Current(t).Kube.CoreV1().Events(namespace).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, e := range events.Items {
		if e.InvolvedObject.Kind == kind && e.InvolvedObject.Name == name && e.Reason == reason && strings.Contains(e.Message, text) {
			t.Logf("event on %s %s: %s %s: %s", kind, name, e.Type, e.Reason, e.Message)
			return nil
		}
	}
	return fmt.Errorf("no %s event on %s %s among %d events", reason, kind, name, len(events.Items))
}
