package e2e

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
			NamespaceSelector:       serveNarrow(nil, ns.Name),
		}},
	})

	data, err := os.ReadFile(filepath.Join("testdata", "globalcontext", "policies.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, obj := range clusterDecode(t, bytes.ReplaceAll(data, []byte("NAMESPACE"), []byte(ns.Name))) {
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
	clusterAwaitReady(t, c.Dynamic.Resource(mpolGVR), "e2e-gctx-pod-team", "True", "")

	seq := 0
	podLabels := func() (map[string]string, error) {
		seq++
		pod, err := c.Kube.CoreV1().Pods(ns.Name).Create(t.Context(), &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pod-%d", seq)},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}},
		}, metav1.CreateOptions{})
		if err != nil {
			return nil, err
		}
		return pod.Labels, nil
	}
	clusterAwait(t, "a Pod labelled from the GlobalContextEntries", func() error {
		l, err := podLabels()
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
		l, err := podLabels()
		if err != nil {
			return err
		}
		if l["e2e.morph.dev/team"] != "PAYMENTS" || l["e2e.morph.dev/configmaps"] != "2" {
			return fmt.Errorf("labels %v, want e2e.morph.dev/team=PAYMENTS and e2e.morph.dev/configmaps=2", l)
		}
		return nil
	})
}
