package e2e

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var gctxGVR = schema.GroupVersionResource{Group: "kyverno.io", Version: "v2beta1", Resource: "globalcontextentries"}

// TestGlobalContext runs morph serve in cluster mode against the real API server with
// Kyverno's GlobalContextEntry kind installed, and a MutatingPolicy that labels Pods
// with globalContext.Get of two entries created through the API:
//
//   - a spec.kubernetesResource entry (ConfigMaps of the test's namespace, watched by
//     an informer) projected with Kyverno's JMESPath function to_upper;
//   - a spec.apiCall.urlPath entry (the API server's ConfigMap list, refreshed every
//     second) projected with length(items).
//
// A change of the watched ConfigMap reaches the next Pod.
func TestGlobalContext(t *testing.T) {
	c := Current(t)
	bin := serveBuildMorph(t)

	for _, crd := range clusterDecodeCRDs(t, serveRunMorph(t, bin, "generate", "crds")) {
		if _, err := c.APIExtensions.ApiextensionsV1().CustomResourceDefinitions().Get(t.Context(), crd.Name, metav1.GetOptions{}); err == nil {
			t.Fatalf("CRD %s already exists: another test installed it", crd.Name)
		}
		CreateCRD(t, crd)
	}
	CreateCRD(t, serveCRD(t, filepath.Join("testdata", "globalcontext", "globalcontextentry-crd.yaml")))
	ns := CreateNamespace(t, "e2e-gctx-", nil)
	deleteClusterConfigs(t)

	source, err := c.Kube.CoreV1().ConfigMaps(ns.Name).Create(t.Context(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "team-source"},
		Data:       map[string]string{"team": "platform"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	gctxServe(t, bin, ns.Name)

	gctxCreate(t, "policies.yaml", ns.Name)
	clusterAwaitReady(t, c.Dynamic.Resource(mpolGVR), "e2e-gctx-pod-team", "True", "")

	podLabels := gctxPods(t, ns.Name)
	clusterAwait(t, "a Pod labelled from the GlobalContextEntries", func() error {
		l, err := podLabels(nil)
		if err != nil {
			return err
		}
		// The namespace holds team-source only (the test's control plane runs no
		// controller that would add kube-root-ca.crt).
		if l["e2e.morph.dev/team"] != "PLATFORM" || l["e2e.morph.dev/configmaps"] != "1" {
			return fmt.Errorf("labels %v, want e2e.morph.dev/team=PLATFORM and e2e.morph.dev/configmaps=1", l)
		}
		return nil
	})

	// The kubernetesResource entry follows the watched ConfigMaps; the apiCall entry is
	// called again after its refreshInterval.
	source.Data["team"] = "payments"
	if _, err := c.Kube.CoreV1().ConfigMaps(ns.Name).Update(t.Context(), source, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Kube.CoreV1().ConfigMaps(ns.Name).Create(t.Context(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "another"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	clusterAwait(t, "a Pod labelled from the changed ConfigMaps", func() error {
		l, err := podLabels(nil)
		if err != nil {
			return err
		}
		if l["e2e.morph.dev/team"] != "PAYMENTS" || l["e2e.morph.dev/configmaps"] != "2" {
			return fmt.Errorf("labels %v, want e2e.morph.dev/team=PAYMENTS and e2e.morph.dev/configmaps=2", l)
		}
		return nil
	})

	// The leader wrote each entry's status: Ready, and the apiCall entry's
	// lastRefreshTime.
	gctxAwaitStatus(t, "e2e-gctx-teams", "True", "Succeeded", "Ready", false)
	gctxAwaitStatus(t, "e2e-gctx-count", "True", "Succeeded", "Ready", true)

	// An entry whose kubernetesResource the API server does not serve answers at once
	// with an error saying so (not after an informer's sync timeout: the webhook's
	// 10 s would end first), and its status says it too.
	_, err = c.Kube.CoreV1().Pods(ns.Name).Create(t.Context(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "pod-widgets", Labels: map[string]string{"e2e.morph.dev/widgets": "yes"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}},
	}, metav1.CreateOptions{})
	const notServed = "reading widgets.e2e.morph.dev at v1: the API server does not serve this resource"
	if err == nil || !strings.Contains(err.Error(), notServed) {
		t.Fatalf("a Pod reading the widgets entry: %v, want a denial containing %q", err, notServed)
	}
	gctxAwaitStatus(t, "e2e-gctx-widgets", "False", "Failed", notServed, false)
	// ... with a Warning Event, as Kyverno's (in namespace default: the entry is
	// cluster-scoped).
	clusterAwait(t, "a Warning Event on e2e-gctx-widgets", func() error {
		list, err := c.Kube.CoreV1().Events(metav1.NamespaceDefault).List(t.Context(), metav1.ListOptions{FieldSelector: "involvedObject.name=e2e-gctx-widgets"})
		if err != nil {
			return err
		}
		for _, e := range list.Items {
			if e.Type == corev1.EventTypeWarning && e.Reason == "PolicyError" && strings.Contains(e.Message, notServed) {
				return nil
			}
		}
		return fmt.Errorf("events %v", list.Items)
	})
}

// TestGlobalContextNoCRD runs morph serve in cluster mode without Kyverno's
// GlobalContextEntry CRD: morph runs and admits, a policy that does not use
// globalContext mutates as ever, and a policy that does fails with an error saying to
// install the CRD.
func TestGlobalContextNoCRD(t *testing.T) {
	c := Current(t)
	bin := serveBuildMorph(t)
	if _, err := c.APIExtensions.ApiextensionsV1().CustomResourceDefinitions().Get(t.Context(), "globalcontextentries.kyverno.io", metav1.GetOptions{}); err == nil {
		t.Fatal("CRD globalcontextentries.kyverno.io exists: another test installed it")
	}
	for _, crd := range clusterDecodeCRDs(t, serveRunMorph(t, bin, "generate", "crds")) {
		if _, err := c.APIExtensions.ApiextensionsV1().CustomResourceDefinitions().Get(t.Context(), crd.Name, metav1.GetOptions{}); err == nil {
			t.Fatalf("CRD %s already exists: another test installed it", crd.Name)
		}
		CreateCRD(t, crd)
	}
	ns := CreateNamespace(t, "e2e-gctx-nocrd-", nil)
	deleteClusterConfigs(t)
	gctxServe(t, bin, ns.Name)
	gctxCreate(t, "nocrd-policies.yaml", ns.Name)
	clusterAwaitReady(t, c.Dynamic.Resource(mpolGVR), "e2e-gctx-nocrd-plain", "True", "")
	clusterAwaitReady(t, c.Dynamic.Resource(mpolGVR), "e2e-gctx-nocrd-reads", "True", "")

	podLabels := gctxPods(t, ns.Name)
	clusterAwait(t, "a Pod labelled by the policy without globalContext", func() error {
		l, err := podLabels(nil)
		if err != nil {
			return err
		}
		if l["e2e.morph.dev/plain"] != "yes" {
			return fmt.Errorf("labels %v, want e2e.morph.dev/plain=yes", l)
		}
		return nil
	})
	_, err := podLabels(map[string]string{"e2e.morph.dev/reads": "yes"})
	const want = "install Kyverno's CustomResourceDefinition globalcontextentries.kyverno.io"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("a Pod the globalContext policy matches: %v, want a denial containing %q", err, want)
	}
}

// gctxServe starts morph serve in cluster mode (no leader election: it writes the
// statuses) and a webhook configuration sending it the Pods of namespace ns.
func gctxServe(t *testing.T, bin, ns string) {
	t.Helper()
	c := Current(t)
	certDir := t.TempDir()
	var addr string
	for try := 1; ; try++ {
		addr = serveFreeAddr(t)
		p := serveStart(t, bin, "serve", "--kubeconfig", c.KubeconfigPath(), "--leader-elect=false",
			"--cert-dir", certDir, "--addr", addr, "--webhook-url", "https://"+addr, "--log-level", "debug")
		if _, err := serveAwaitReady(p, addr, certDir); err == nil {
			break
		} else if try >= serveStartTries || !p.log.contains("address already in use") {
			t.Fatalf("morph serve --kubeconfig: %v\n%s", err, p.log)
		}
	}
	ca, err := os.ReadFile(filepath.Join(certDir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	url := "https://" + addr + "/mutate"
	fail := admissionregistrationv1.Fail
	none := admissionregistrationv1.SideEffectClassNone
	CreateMutatingWebhookConfiguration(t, &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-globalcontext"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:         "mutate.globalcontext.e2e.morph.dev",
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: ca},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
			}},
			FailurePolicy:           &fail,
			SideEffects:             &none,
			AdmissionReviewVersions: []string{"v1"},
			NamespaceSelector:       serveNarrow(nil, ns),
		}},
	})
}

// gctxCreate creates the objects of testdata/globalcontext/file (NAMESPACE replaced by
// ns), deleted when the test ends.
func gctxCreate(t *testing.T, file, ns string) {
	t.Helper()
	c := Current(t)
	data, err := os.ReadFile(filepath.Join("testdata", "globalcontext", file))
	if err != nil {
		t.Fatal(err)
	}
	for _, obj := range clusterDecode(t, bytes.ReplaceAll(data, []byte("NAMESPACE"), []byte(ns))) {
		gvr := map[string]schema.GroupVersionResource{"GlobalContextEntry": gctxGVR, "MutatingPolicy": mpolGVR}[obj.GetKind()]
		if _, err := c.Dynamic.Resource(gvr).Create(t.Context(), obj, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s %s: %v", obj.GetKind(), obj.GetName(), err)
		}
		t.Cleanup(func() {
			ctx, cancel := cleanupContext()
			defer cancel()
			if err := c.Dynamic.Resource(gvr).Delete(ctx, obj.GetName(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("cleanup: delete %s %s: %v", obj.GetKind(), obj.GetName(), err)
			}
		})
	}
}

// gctxPods returns a function creating a Pod in ns, with labels, and returning the
// labels it was admitted with.
func gctxPods(t *testing.T, ns string) func(labels map[string]string) (map[string]string, error) {
	c := Current(t)
	seq := 0
	return func(labels map[string]string) (map[string]string, error) {
		seq++
		pod, err := c.Kube.CoreV1().Pods(ns).Create(t.Context(), &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pod-%d", seq), Labels: labels},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}},
		}, metav1.CreateOptions{})
		if err != nil {
			return nil, err
		}
		return pod.Labels, nil
	}
}

// gctxAwaitStatus waits until the entry's Ready condition has status, reason and a
// message containing message, and (refreshed) a lastRefreshTime.
func gctxAwaitStatus(t *testing.T, name, status, reason, message string, refreshed bool) {
	t.Helper()
	c := Current(t)
	clusterAwait(t, fmt.Sprintf("GlobalContextEntry %s Ready=%s", name, status), func() error {
		o, err := c.Dynamic.Resource(gctxGVR).Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if at, _, _ := unstructured.NestedString(o.Object, "status", "lastRefreshTime"); refreshed && at == "" {
			return fmt.Errorf("status %v: no lastRefreshTime", o.Object["status"])
		}
		conds, _, _ := unstructured.NestedSlice(o.Object, "status", "conditions")
		for _, cond := range conds {
			m, _ := cond.(map[string]any)
			if m["type"] != "Ready" {
				continue
			}
			msg, _ := m["message"].(string)
			if m["status"] != status || m["reason"] != reason || !strings.Contains(msg, message) {
				return fmt.Errorf("Ready %v, want status %s, reason %s, message containing %q", m, status, reason, message)
			}
			return nil
		}
		return fmt.Errorf("status %v: no Ready condition", o.Object["status"])
	})
}
