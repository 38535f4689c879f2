package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The cluster-mode tests run morph serve processes with the harness's kubeconfig and
// --webhook-url: morph registers its webhook configurations (named morph), keeps its
// certificates in Secret morph-webhook-tls of its --namespace, patches CRD caBundles,
// and elects a leader on Lease morph.

// clusterSecret is the certificate Secret of cluster mode.
const clusterSecret = "morph-webhook-tls"

// clusterLease bounds of the failover test: short, so that the test is quick.
var clusterLeaseArgs = []string{"--leader-election-lease-duration", "6s", "--leader-election-renew-deadline", "4s", "--leader-election-retry-period", "1s"}

// clusterMorph is a morph serve process in cluster mode.
type clusterMorph struct {
	*serveProcess
	addr string
}

func (m *clusterMorph) url() string { return "https://" + m.addr }

// clusterPolicies copies policy files into a fresh folder, so that a test may change it.
func clusterPolicies(t *testing.T, files ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(serveTestdata, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(filepath.Dir(f))+"-"+filepath.Base(f)), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// startClusterMorph starts morph serve in cluster mode on a free port of 127.0.0.1,
// registering its own URL, and waits until it serves the Secret's certificate and its
// policies are loaded.
func startClusterMorph(t *testing.T, bin, policies, namespace string, extra ...string) *clusterMorph {
	t.Helper()
	addr := serveFreeAddr(t)
	args := append([]string{"serve", "--policies", policies, "--kubeconfig", Current(t).KubeconfigPath(),
		"--namespace", namespace, "--addr", addr, "--webhook-url", "https://" + addr, "--reload-interval", "500ms"}, extra...)
	p := serveStart(t, bin, args...)
	m := &clusterMorph{serveProcess: p, addr: addr}
	Eventually(t, serveReadyTimeout, func() error {
		select {
		case <-p.done:
			return fmt.Errorf("morph exited: %v\n%s", p.waitErr, p.log)
		default:
		}
		client, err := clusterClient(t, namespace)
		if err != nil {
			return err
		}
		resp, err := client.Get(m.url() + "/readyz")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			body, _ := io.ReadAll(resp.Body)
			return fmt.Errorf("/readyz %s: %s", resp.Status, body)
		}
		return nil
	})
	return m
}

// clusterCA is the caBundle of the certificate Secret.
func clusterCA(t *testing.T, namespace string) ([]byte, error) {
	sec, err := Current(t).Kube.CoreV1().Secrets(namespace).Get(context.Background(), clusterSecret, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	if len(sec.Data["ca.crt"]) == 0 {
		return nil, errors.New("the Secret has no ca.crt")
	}
	return sec.Data["ca.crt"], nil
}

// clusterClient is an HTTPS client trusting the Secret's caBundle.
func clusterClient(t *testing.T, namespace string) (*http.Client, error) {
	ca, err := clusterCA(t, namespace)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, errors.New("ca.crt holds no certificate")
	}
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		Proxy: nil, DisableKeepAlives: true,
		TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12},
	}}, nil
}

// deleteClusterConfigs removes the configurations morph registered, at test cleanup
// (after the processes stopped: cleanups run last in, first out).
func deleteClusterConfigs(t *testing.T) {
	t.Helper()
	c := Current(t)
	t.Cleanup(func() {
		ctx, cancel := cleanupContext()
		defer cancel()
		if err := c.Kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, "morph", metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("cleanup: %v", err)
		}
		if err := c.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(ctx, "morph", metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("cleanup: %v", err)
		}
	})
}

func getMorphMutating(t *testing.T) (*admissionregistrationv1.MutatingWebhookConfiguration, error) {
	return Current(t).Kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(context.Background(), "morph", metav1.GetOptions{})
}

// mutatingResources lists "resource@url" for the rules of every webhook, once each;
// the url is the server's /mutate, without the webhook group's segment (/mutate/<group>),
// and "service" for a webhook that names a Service.
func mutatingResources(m *admissionregistrationv1.MutatingWebhookConfiguration) []string {
	var out []string
	for _, w := range m.Webhooks {
		url := "service"
		if w.ClientConfig.URL != nil {
			url = *w.ClientConfig.URL
			if i := strings.Index(url, "/mutate/"); i >= 0 {
				url = url[:i+len("/mutate")]
			}
		}
		for _, r := range w.Rules {
			for _, res := range r.Resources {
				out = append(out, res+"@"+url)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out) // a resource may appear in rules of several versions
}

// awaitRegistration waits until the mutating configuration sends want (resources, in
// mutatingResources' form) with the Secret's caBundle.
func awaitRegistration(t *testing.T, namespace string, timeout time.Duration, want ...string) {
	t.Helper()
	slices.Sort(want)
	Eventually(t, timeout, func() error {
		m, err := getMorphMutating(t)
		if err != nil {
			return err
		}
		if got := mutatingResources(m); !slices.Equal(got, want) {
			return fmt.Errorf("registered %v, want %v", got, want)
		}
		ca, err := clusterCA(t, namespace)
		if err != nil {
			return err
		}
		for _, w := range m.Webhooks {
			if !bytes.Equal(w.ClientConfig.CABundle, ca) {
				return fmt.Errorf("webhook %s: caBundle is not the Secret's ca.crt", w.Name)
			}
		}
		if m.Labels["app.kubernetes.io/managed-by"] != "morph" {
			return fmt.Errorf("labels %v", m.Labels)
		}
		return nil
	})
}

func clusterPod(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}},
	}
}

// TestClusterRegistration: one morph in cluster mode registers its webhooks with the
// Secret's caBundle and rules from the policies, mutates a Pod and a ConfigMap created
// through the API, puts back a hand edit, narrows the rules when a policy file goes,
// patches the caBundle of the CRD its Katalog updateCRD entry names, and a v1 object
// reads back as v2 through the API server.
func TestClusterRegistration(t *testing.T) {
	c := Current(t)
	bin := serveBuildMorph(t)
	own := CreateNamespace(t, "e2e-cluster-morph-", nil)
	ns := CreateNamespace(t, "e2e-cluster-", nil)
	deleteClusterConfigs(t)
	policies := clusterPolicies(t, "cluster/pods.yaml", "process/configmaps.yaml", "cronjob/katalog.yaml")

	// The CRD converts through morph but has no caBundle: morph patches it.
	crd := serveCRD(t, filepath.Join(serveTestdata, "cronjob", "crd.yaml"))
	m := startClusterMorph(t, bin, policies, own.Name)
	convertURL := m.url() + "/convert"
	crd.Spec.Conversion.Webhook.ClientConfig = &apiextensionsv1.WebhookClientConfig{URL: &convertURL}
	created, err := c.APIExtensions.ApiextensionsV1().CustomResourceDefinitions().Create(t.Context(), crd, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create CRD: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := cleanupContext()
		defer cancel()
		_ = c.APIExtensions.ApiextensionsV1().CustomResourceDefinitions().Delete(ctx, created.Name, metav1.DeleteOptions{})
		_ = poll(ctx, time.Minute, func() error {
			_, err := c.APIExtensions.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, created.Name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			return errors.New("still there")
		})
	})

	u := m.url() + "/mutate"
	awaitRegistration(t, own.Name, 30*time.Second, "configmaps@"+u, "pods@"+u)
	mut, _ := getMorphMutating(t)
	w := mut.Webhooks[0]
	if *w.SideEffects != admissionregistrationv1.SideEffectClassNone || *w.MatchPolicy != admissionregistrationv1.Equivalent ||
		!slices.Equal(w.NamespaceSelector.MatchExpressions[0].Values, []string{"kube-system", own.Name}) {
		t.Errorf("webhook %s: sideEffects %v matchPolicy %v namespaceSelector %v", w.Name, *w.SideEffects, *w.MatchPolicy, w.NamespaceSelector)
	}

	// Objects created through the API are mutated (the policies fail open, so a
	// mutation proves the API server called morph).
	Eventually(t, 30*time.Second, func() error {
		name := fmt.Sprintf("pod-%d", time.Now().UnixNano())
		pod, err := c.Kube.CoreV1().Pods(ns.Name).Create(t.Context(), clusterPod(name), metav1.CreateOptions{})
		if err != nil {
			return err
		}
		if pod.Labels["e2e.morph.dev/cluster"] != "registered" {
			return fmt.Errorf("pod labels %v", pod.Labels)
		}
		return nil
	})
	cm, err := c.Kube.CoreV1().ConfigMaps(ns.Name).Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm"}}, metav1.CreateOptions{})
	if err != nil || cm.Data["mutated"] != "yes" {
		t.Errorf("ConfigMap through the API: %v, data %v; want data.mutated=yes", err, cm.Data)
	}

	// A hand edit is put back.
	edited := mut.DeepCopy()
	edited.Webhooks = edited.Webhooks[:1]
	edited.Webhooks[0].Rules = edited.Webhooks[0].Rules[:1]
	edited.Webhooks[0].Rules[0].Resources = []string{"secrets"}
	if _, err := c.Kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Update(t.Context(), edited, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("hand edit: %v", err)
	}
	awaitRegistration(t, own.Name, 10*time.Second, "configmaps@"+u, "pods@"+u)

	// The Katalog's updateCRD: the CRD gets the Secret's caBundle, and conversion works
	// through the API server.
	ca, err := clusterCA(t, own.Name)
	if err != nil {
		t.Fatal(err)
	}
	Eventually(t, 40*time.Second, func() error {
		got, err := c.APIExtensions.ApiextensionsV1().CustomResourceDefinitions().Get(t.Context(), created.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if cc := got.Spec.Conversion.Webhook.ClientConfig; !bytes.Equal(cc.CABundle, ca) {
			return errors.New("the CRD's caBundle is not the Secret's ca.crt")
		}
		if !crdCondition(got, apiextensionsv1.Established) {
			return errors.New("not established")
		}
		return nil
	})
	cronjobs := func(version string) schema.GroupVersionResource {
		return schema.GroupVersionResource{Group: serveCronJobGroup, Version: version, Resource: "cronjobs"}
	}
	Eventually(t, 30*time.Second, func() error {
		_, err := c.Dynamic.Resource(cronjobs("v1")).Namespace(ns.Name).Create(t.Context(), serveCronJob("v1", "nightly", "0 2 * * 1-5"), metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	})
	var atV2 *unstructured.Unstructured
	Eventually(t, 30*time.Second, func() error {
		atV2, err = c.Dynamic.Resource(cronjobs("v2")).Namespace(ns.Name).Get(t.Context(), "nightly", metav1.GetOptions{})
		return err
	})
	if hour, _, _ := unstructured.NestedString(atV2.Object, "spec", "schedule", "hour"); atV2.GetAPIVersion() != serveCronJobGroup+"/v2" || hour != "2" {
		t.Errorf("nightly read at v2: %s spec %v; want v2 with schedule.hour 2", atV2.GetAPIVersion(), atV2.Object["spec"])
	}
	// A removed caBundle comes back (the CRD watch).
	Eventually(t, 10*time.Second, func() error {
		got, err := c.APIExtensions.ApiextensionsV1().CustomResourceDefinitions().Get(t.Context(), created.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		got.Spec.Conversion.Webhook.ClientConfig.CABundle = nil
		_, err = c.APIExtensions.ApiextensionsV1().CustomResourceDefinitions().Update(t.Context(), got, metav1.UpdateOptions{})
		return err
	})
	Eventually(t, 10*time.Second, func() error {
		got, err := c.APIExtensions.ApiextensionsV1().CustomResourceDefinitions().Get(t.Context(), created.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !bytes.Equal(got.Spec.Conversion.Webhook.ClientConfig.CABundle, ca) {
			return errors.New("caBundle not restored")
		}
		return nil
	})

	// A policy file removed: the rules narrow.
	if err := os.Remove(filepath.Join(policies, "process-configmaps.yaml")); err != nil {
		t.Fatal(err)
	}
	awaitRegistration(t, own.Name, 15*time.Second, "pods@"+u)

	// The registration is stable: no writes while nothing changes.
	if n := countWrites(t, m); n > 4 {
		t.Errorf("morph wrote the configuration %d times for 4 changes (create, revert, narrow...): a reconcile loop?\n%s", n, m.log)
	}
}

// countWrites counts the registration writes morph logged.
func countWrites(t *testing.T, m *clusterMorph) int {
	t.Helper()
	return strings.Count(m.log.String(), "webhook registration written")
}

// TestClusterFailover: two replicas serve; the leader registers; SIGKILL the leader
// and the other takes the lease once it expired (never before: checked on the Lease's
// timestamps), registers itself and reverts a hand edit; its shutdown releases the
// lease. The takeover times are logged (docs/cluster.md, "Failover").
func TestClusterFailover(t *testing.T) {
	c := Current(t)
	bin := serveBuildMorph(t)
	own := CreateNamespace(t, "e2e-cluster-morph-", nil)
	deleteClusterConfigs(t)
	policies := clusterPolicies(t, "cluster/pods.yaml")

	a := startClusterMorph(t, bin, policies, own.Name, clusterLeaseArgs...)
	awaitRegistration(t, own.Name, 30*time.Second, "pods@"+a.url()+"/mutate")
	b := startClusterMorph(t, bin, policies, own.Name, clusterLeaseArgs...)

	// Both replicas serve admission with the same certificate.
	client, err := clusterClient(t, own.Name)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []*clusterMorph{a, b} {
		if err := clusterMutate(client, m.url(), "both-serve"); err != nil {
			t.Errorf("replica %s: %v", m.addr, err)
		}
	}
	lease, err := c.Kube.CoordinationV1().Leases(own.Name).Get(t.Context(), "morph", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("leader %s", *lease.Spec.HolderIdentity)

	// SIGKILL the leader: the lease is not released; b takes over once it expires.
	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	select {
	case <-a.done:
	case <-time.After(30 * time.Second):
		t.Fatal("a did not die within 30s of SIGKILL")
	}
	// a is dead: the Lease holds its last renewal.
	dead, err := c.Kube.CoordinationV1().Leases(own.Name).Get(t.Context(), "morph", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	awaitRegistration(t, own.Name, 30*time.Second, "pods@"+b.url()+"/mutate")
	registered := time.Now()
	taken, err := c.Kube.CoordinationV1().Leases(own.Name).Get(t.Context(), "morph", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if dead.Spec.HolderIdentity == nil || taken.Spec.HolderIdentity == nil || *taken.Spec.HolderIdentity == *dead.Spec.HolderIdentity ||
		dead.Spec.RenewTime == nil || taken.Spec.AcquireTime == nil || dead.Spec.LeaseDurationSeconds == nil {
		t.Fatalf("lease before %+v, after %+v: want another holder with an acquireTime", dead.Spec, taken.Spec)
	}
	lastRenewal, acquired := dead.Spec.RenewTime.Time, taken.Spec.AcquireTime.Time
	leaseDuration := time.Duration(*dead.Spec.LeaseDurationSeconds) * time.Second
	// The figures of docs/cluster.md ("Failover, measured"); not asserted: they depend
	// on the machine's load.
	t.Logf("failover: a's last renewal %s; killed %v after it; b acquired %v after the last renewal (lease %v); b registered %v after the kill",
		lastRenewal.Format(time.RFC3339Nano), killed.Sub(lastRenewal).Round(time.Millisecond),
		acquired.Sub(lastRenewal).Round(time.Millisecond), leaseDuration, registered.Sub(killed).Round(100*time.Millisecond))
	// The safety of the election, from the Lease's own timestamps (one host, one
	// clock): a candidate acquires only once it has seen the record unchanged for the
	// lease duration, so never less than that after the dead leader's last renewal.
	if acquired.Sub(lastRenewal) < leaseDuration {
		t.Errorf("b acquired the lease %v after a's last renewal, before the lease duration %v ran out", acquired.Sub(lastRenewal), leaseDuration)
	}

	// b reverts a hand edit.
	mut, err := getMorphMutating(t)
	if err != nil {
		t.Fatal(err)
	}
	mut.Webhooks[0].Rules[0].Resources = []string{"secrets"}
	if _, err := c.Kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Update(t.Context(), mut, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	awaitRegistration(t, own.Name, 10*time.Second, "pods@"+b.url()+"/mutate")

	// SIGTERM b: it releases the lease.
	if err := b.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-b.done:
	case <-time.After(30 * time.Second):
		t.Fatal("b did not stop within 30s of SIGTERM")
	}
	lease, err = c.Kube.CoordinationV1().Leases(own.Name).Get(t.Context(), "morph", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h := lease.Spec.HolderIdentity; h != nil && *h != "" {
		t.Errorf("after b's shutdown the lease is held by %q; want released", *h)
	}
}

// clusterMutate sends an AdmissionReview of a ConfigMap to morph and checks the answer
// admits it with a patch.
func clusterMutate(client *http.Client, base, name string) error {
	body := fmt.Appendf(nil, `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u-%s","kind":{"group":"","version":"v1","kind":"Pod"},"resource":{"group":"","version":"v1","resource":"pods"},"name":%q,"namespace":"default","operation":"CREATE","object":{"apiVersion":"v1","kind":"Pod","metadata":{"name":%q,"namespace":"default"},"spec":{"containers":[{"name":"app","image":"x"}]}}}}`, name, name, name)
	resp, err := client.Post(base+"/mutate", "application/json", bytes.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !bytes.Contains(answer, []byte(`"allowed":true`)) || !bytes.Contains(answer, []byte(`"patch"`)) {
		return fmt.Errorf("/mutate %s: %s", resp.Status, answer)
	}
	return nil
}

// TestClusterCertificateRotation: with a serving certificate valid 30 s (renewed at
// two thirds), admission requests sent to morph directly and Pods created through the
// API server while the certificate changes all succeed and are mutated.
func TestClusterCertificateRotation(t *testing.T) {
	c := Current(t)
	bin := serveBuildMorph(t)
	own := CreateNamespace(t, "e2e-cluster-morph-", nil)
	ns := CreateNamespace(t, "e2e-cluster-rotate-", nil)
	deleteClusterConfigs(t)
	policies := clusterPolicies(t, "cluster/pods.yaml")
	m := startClusterMorph(t, bin, policies, own.Name, "--cert-validity", "30s")
	awaitRegistration(t, own.Name, 30*time.Second, "pods@"+m.url()+"/mutate")
	client, err := clusterClient(t, own.Name) // the CA does not change with a renewal
	if err != nil {
		t.Fatal(err)
	}

	const (
		duration    = 50 * time.Second
		maxRequests = 3000
	)
	serials := map[string]bool{}
	var sent, failed int
	var failures []string
	deadline := time.Now().Add(duration)
	for i := 0; i < maxRequests && time.Now().Before(deadline); i++ {
		// Directly, on a new connection each time, noting the certificate served.
		conn, err := tls.Dial("tcp", m.addr, client.Transport.(*http.Transport).TLSClientConfig)
		if err == nil {
			serials[conn.ConnectionState().PeerCertificates[0].SerialNumber.String()] = true
			_ = conn.Close()
		}
		sent++
		if err == nil {
			err = clusterMutate(client, m.url(), fmt.Sprintf("direct-%d", i))
		}
		if err != nil {
			failed++
			failures = append(failures, err.Error())
		}
		// Through the API server: a Pod without morph's label means the call failed
		// (the policy fails open).
		if i%5 == 0 {
			sent++
			pod, err := c.Kube.CoreV1().Pods(ns.Name).Create(t.Context(), clusterPod(fmt.Sprintf("rotate-%d", i)), metav1.CreateOptions{})
			if err == nil && pod.Labels["e2e.morph.dev/cluster"] != "registered" {
				err = fmt.Errorf("pod %s created without morph's label", pod.Name)
			}
			if err != nil {
				failed++
				failures = append(failures, err.Error())
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("%d requests, %d failed, %d serving certificates seen", sent, failed, len(serials))
	if failed > 0 {
		t.Errorf("%d of %d requests failed while the certificate rotated; first: %s", failed, sent, failures[0])
	}
	if len(serials) < 2 {
		t.Errorf("saw %d serving certificate(s) in %v; want a rotation (validity 30s, renewed at 2/3)", len(serials), duration)
	}
}

// pemCertificates parses every certificate of a PEM bundle.
func pemCertificates(t *testing.T, bundle []byte) []*x509.Certificate {
	t.Helper()
	var out []*x509.Certificate
	for rest := bundle; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			return out
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatalf("caBundle: %v", err)
		}
		out = append(out, c)
	}
}

// TestClusterCARoll: the CA of the certificate Secret is replaced (its key removed, as
// when it is lost) while a client keeps sending admission requests, directly and through
// the API server. The leader adds a new CA in front of the old one in the bundle and
// keeps the serving certificate, which the old CA still vouches for; the webhook
// configuration's caBundle follows (old and new CA during the overlap); the serving
// certificate moves to the new CA at its next renewal (validity 30 s, renewed at two
// thirds); no request fails throughout.
func TestClusterCARoll(t *testing.T) {
	c := Current(t)
	bin := serveBuildMorph(t)
	own := CreateNamespace(t, "e2e-cluster-morph-", nil)
	ns := CreateNamespace(t, "e2e-cluster-caroll-", nil)
	deleteClusterConfigs(t)
	policies := clusterPolicies(t, "cluster/pods.yaml")
	m := startClusterMorph(t, bin, policies, own.Name, "--cert-validity", "30s")
	awaitRegistration(t, own.Name, 30*time.Second, "pods@"+m.url()+"/mutate")
	secrets := c.Kube.CoreV1().Secrets(own.Name)
	sec, err := secrets.Get(t.Context(), clusterSecret, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	oldCAs := pemCertificates(t, sec.Data["ca.crt"])
	if len(oldCAs) != 1 {
		t.Fatalf("the fresh Secret's bundle holds %d CAs, want 1", len(oldCAs))
	}
	oldCA := oldCAs[0]

	const (
		maxDuration = 90 * time.Second
		maxRequests = 4000
	)
	var (
		sent, failed       int
		failures           []string
		rolled             bool
		newCA              *x509.Certificate
		sawOverlap         bool // the webhook's caBundle held the old and the new CA
		servedByNew        time.Time
		servedSerials      = map[string]bool{}
		issuers            = map[string]bool{}
		deadline           = time.Now().Add(maxDuration)
		rollAt             = time.Now().Add(3 * time.Second)
		webhookCAs         []*x509.Certificate
		lastBundle, lastCA []byte
	)
	for i := 0; i < maxRequests && time.Now().Before(deadline); i++ {
		if !rolled && time.Now().After(rollAt) {
			// Lose the CA's key: the leader must roll the CA.
			err := poll(t.Context(), 10*time.Second, func() error {
				sec, err := secrets.Get(t.Context(), clusterSecret, metav1.GetOptions{})
				if err != nil {
					return err
				}
				delete(sec.Data, "ca.key")
				_, err = secrets.Update(t.Context(), sec, metav1.UpdateOptions{})
				return err
			})
			if err != nil {
				t.Fatalf("removing ca.key: %v", err)
			}
			rolled = true
			t.Logf("removed ca.key after %d requests", sent)
		}
		// The client trusts what the Secret's bundle holds now, as the API server
		// trusts what the webhook configuration holds.
		bundle, err := clusterCA(t, own.Name)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(bundle, lastCA) {
			lastCA = bundle
			if cas := pemCertificates(t, bundle); rolled && newCA == nil && len(cas) == 2 && cas[1].Equal(oldCA) {
				newCA = cas[0]
				t.Logf("the Secret holds a new CA (%s) before the old one after %d requests", newCA.Subject.CommonName, sent)
			}
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(bundle)
		tlsConfig := &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}
		client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true, TLSClientConfig: tlsConfig}}
		conn, err := tls.Dial("tcp", m.addr, tlsConfig)
		if err == nil {
			leaf := conn.ConnectionState().PeerCertificates[0]
			servedSerials[leaf.SerialNumber.String()] = true
			issuers[string(leaf.AuthorityKeyId)] = true
			if newCA != nil && servedByNew.IsZero() && bytes.Equal(leaf.AuthorityKeyId, newCA.SubjectKeyId) {
				servedByNew = time.Now()
				t.Logf("morph serves a certificate of the new CA after %d requests", sent)
			}
			_ = conn.Close()
		}
		sent++
		if err == nil {
			err = clusterMutate(client, m.url(), fmt.Sprintf("caroll-%d", i))
		}
		if err != nil {
			failed++
			failures = append(failures, err.Error())
		}
		// Through the API server: a Pod without morph's label means the call failed
		// (the policy fails open).
		if i%5 == 0 {
			sent++
			pod, err := c.Kube.CoreV1().Pods(ns.Name).Create(t.Context(), clusterPod(fmt.Sprintf("caroll-%d", i)), metav1.CreateOptions{})
			if err == nil && pod.Labels["e2e.morph.dev/cluster"] != "registered" {
				err = fmt.Errorf("pod %s created without morph's label", pod.Name)
			}
			if err != nil {
				failed++
				failures = append(failures, err.Error())
			}
			// The webhook configuration's caBundle.
			if mut, err := getMorphMutating(t); err == nil && len(mut.Webhooks) > 0 && !bytes.Equal(mut.Webhooks[0].ClientConfig.CABundle, lastBundle) {
				lastBundle = mut.Webhooks[0].ClientConfig.CABundle
				webhookCAs = pemCertificates(t, lastBundle)
			}
			// Checked on every round, not only when the caBundle changed: the leader
			// writes the Secret and the webhook configuration milliseconds apart, so this
			// loop may see the new caBundle before it has seen the new CA in the Secret.
			if cas := webhookCAs; !sawOverlap && newCA != nil && len(cas) == 2 && cas[0].Equal(newCA) && cas[1].Equal(oldCA) {
				sawOverlap = true
				t.Logf("the webhook caBundle holds the new and the old CA after %d requests", sent)
			}
		}
		// Done some seconds after morph serves the new CA's certificate.
		if !servedByNew.IsZero() && time.Since(servedByNew) > 5*time.Second {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("%d requests, %d failed, %d serving certificates of %d issuers seen; the webhook caBundle holds %d CAs at the end", sent, failed, len(servedSerials), len(issuers), len(webhookCAs))
	if failed > 0 {
		t.Errorf("%d of %d requests failed while the CA rolled; first: %s", failed, sent, failures[0])
	}
	switch {
	case newCA == nil:
		t.Errorf("the leader did not roll the CA within %v of losing its key", maxDuration)
	case !sawOverlap:
		t.Error("the webhook configuration's caBundle never held the new CA followed by the old one")
	case servedByNew.IsZero():
		t.Errorf("morph did not move to a certificate of the new CA within %v", maxDuration)
	}
}
