package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"
)

// The background tests run morph serve in cluster mode with its policies from the API
// server and check what the leader's background controller does to objects that
// already exist (docs/cluster.md, "Mutating existing objects").

// bgTimeout bounds each wait for the background controller.
const bgTimeout = 45 * time.Second

var (
	widgetGVR   = schema.GroupVersionResource{Group: "background.e2e.morph.dev", Version: "v1", Resource: "widgets"}
	sprocketGVR = schema.GroupVersionResource{Group: "background.e2e.morph.dev", Version: "v1", Resource: "sprockets"}
	bgRequests  = schema.GroupVersionResource{Group: "morph.dev", Version: "v1alpha1", Resource: "backgroundrequests"}
)

// bgCluster is what the background tests share: the CRDs installed, morph's own
// namespace and a namespace for the test's objects.
type bgCluster struct {
	bin, own, ns string
	// triggers acts as another user than morph (which ignores the requests it makes
	// itself, as Kyverno's background controller does).
	triggers kubernetes.Interface
}

func bgSetup(t *testing.T, testCRDs bool) *bgCluster {
	t.Helper()
	c := Current(t)
	b := &bgCluster{bin: serveBuildMorph(t)}
	for _, crd := range clusterDecodeCRDs(t, serveRunMorph(t, b.bin, "generate", "crds")) {
		CreateCRD(t, crd)
	}
	if testCRDs {
		data, err := os.ReadFile(filepath.Join("testdata", "background", "crds.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range clusterDecode(t, data) {
			raw, err := yaml.Marshal(u.Object)
			if err != nil {
				t.Fatal(err)
			}
			crd := &apiextensionsv1.CustomResourceDefinition{}
			if err := yaml.UnmarshalStrict(raw, crd); err != nil {
				t.Fatal(err)
			}
			CreateCRD(t, crd)
		}
	}
	b.own = CreateNamespace(t, "e2e-bg-morph-", nil).Name
	b.ns = CreateNamespace(t, "e2e-bg-", nil).Name
	deleteClusterConfigs(t)
	cfg := c.Config()
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "e2e-trigger", Groups: []string{"system:masters", "system:authenticated"}}
	cfg.QPS, cfg.Burst = 100, 200
	var err error
	if b.triggers, err = kubernetes.NewForConfig(cfg); err != nil {
		t.Fatal(err)
	}
	return b
}

// start starts a morph replica reading its policies from the API server.
func (b *bgCluster) start(t *testing.T, extra ...string) *clusterMorph {
	t.Helper()
	addr := serveFreeAddr(t)
	args := append([]string{"serve", "--kubeconfig", Current(t).KubeconfigPath(), "--namespace", b.own,
		"--addr", addr, "--webhook-url", "https://" + addr, "--log-level", "debug"}, extra...)
	p := serveStart(t, b.bin, args...)
	m := &clusterMorph{serveProcess: p, addr: addr}
	Eventually(t, serveReadyTimeout, func() error {
		select {
		case <-p.done:
			return fmt.Errorf("morph exited: %v\n%s", p.waitErr, p.log)
		default:
		}
		client, err := clusterClient(t, b.own)
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

// createPolicies creates the policies of a testdata file, with NAMESPACE replaced.
func (b *bgCluster) createPolicies(t *testing.T, file string) {
	t.Helper()
	c := Current(t)
	data, err := os.ReadFile(filepath.Join("testdata", "background", file))
	if err != nil {
		t.Fatal(err)
	}
	for _, obj := range clusterDecode(t, bytes.ReplaceAll(data, []byte("NAMESPACE"), []byte(b.ns))) {
		gvr := map[string]schema.GroupVersionResource{"MutatingPolicy": mpolGVR, "Katalog": katalogGVR}[obj.GetKind()]
		if _, err := c.Dynamic.Resource(gvr).Create(t.Context(), obj, metav1.CreateOptions{FieldValidation: "Strict"}); err != nil {
			t.Fatalf("create %s %s: %v", obj.GetKind(), obj.GetName(), err)
		}
		t.Cleanup(func() {
			ctx, cancel := cleanupContext()
			defer cancel()
			if err := c.Dynamic.Resource(gvr).Delete(ctx, obj.GetName(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("cleanup: delete %s %s: %v", obj.GetKind(), obj.GetName(), err)
			}
		})
		clusterAwaitReady(t, c.Dynamic.Resource(gvr), obj.GetName(), "True", "")
	}
}

func (b *bgCluster) configMap(t *testing.T, name string, labels map[string]string) {
	t.Helper()
	if _, err := b.triggers.CoreV1().ConfigMaps(b.ns).Create(t.Context(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Data:       map[string]string{"v": "0"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// awaitBackgroundRequestsGone waits until the leader processed every BackgroundRequest.
func (b *bgCluster) awaitBackgroundRequestsGone(t *testing.T) {
	t.Helper()
	Eventually(t, bgTimeout, func() error {
		l, err := Current(t).Dynamic.Resource(bgRequests).Namespace(b.own).List(t.Context(), metav1.ListOptions{})
		if err != nil {
			return err
		}
		if n := len(l.Items); n > 0 {
			return fmt.Errorf("%d BackgroundRequests left", n)
		}
		return nil
	})
}

// TestBackground: one replica (leader election on) and the policies of
// testdata/background:
//
//   - a trigger's CREATE, UPDATE and DELETE mutate the right targets (Secrets labelled
//     role=target, not the others), each recorded as a BackgroundRequest that the
//     leader processes and deletes;
//   - a policy created scans the objects that exist;
//   - an expression target (resource.List) selects its targets from the trigger;
//   - a target routed through a subresource (widgets/status) is written there;
//   - a Katalog entry's objects are reconciled, with its Event.
func TestBackground(t *testing.T) {
	c := Current(t)
	b := bgSetup(t, true)

	// Objects that exist before the policies.
	for _, name := range []string{"s1", "s2", "other"} {
		labels := map[string]string{"role": "target"}
		if name == "other" {
			labels = nil
		}
		if _, err := b.triggers.CoreV1().Secrets(b.ns).Create(t.Context(), &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
			StringData: map[string]string{"k": "v"},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	b.configMap(t, "scan-1", map[string]string{"scan": "yes"})
	b.configMap(t, "scan-2", map[string]string{"scan": "yes"})
	b.configMap(t, "no-scan", nil)
	b.configMap(t, "listed-1", map[string]string{"listed": "yes"})
	b.configMap(t, "listed-2", map[string]string{"listed": "yes"})
	b.configMap(t, "not-listed", nil)
	widget := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "background.e2e.morph.dev/v1", "kind": "Widget",
		"metadata": map[string]any{"name": "w1", "namespace": b.ns},
		"spec":     map[string]any{"size": int64(1)},
	}}
	if _, err := c.Dynamic.Resource(widgetGVR).Namespace(b.ns).Create(t.Context(), widget, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sprocket := func(name string) {
		t.Helper()
		obj := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "background.e2e.morph.dev/v1", "kind": "Sprocket",
			"metadata": map[string]any{"name": name, "namespace": b.ns},
			"spec":     map[string]any{"logLevel": "debug"},
		}}
		if _, err := c.Dynamic.Resource(sprocketGVR).Namespace(b.ns).Create(t.Context(), obj, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	sprocket("before")

	m := b.start(t)
	b.createPolicies(t, "katalog.yaml")
	t.Run("katalog reconcile", func(t *testing.T) {
		sprocket("after")
		for _, name := range []string{"before", "after"} {
			Eventually(t, bgTimeout, func() error {
				s, err := c.Dynamic.Resource(sprocketGVR).Namespace(b.ns).Get(t.Context(), name, metav1.GetOptions{})
				if err != nil {
					return err
				}
				spec, _, _ := unstructured.NestedMap(s.Object, "spec")
				// logLevel was set: the default leaves it.
				if fmt.Sprint(spec["replicas"]) != "2" || spec["logLevel"] != "debug" {
					return fmt.Errorf("Sprocket %s spec %v", name, spec)
				}
				return nil
			})
			Eventually(t, bgTimeout, func() error {
				return clusterEvent(t, b.ns, "Sprocket", name, "SprocketMutation", `defaults applied: spec.replicas="2"`)
			})
		}
	})
	b.createPolicies(t, "policies.yaml")

	t.Run("scan on policy creation", func(t *testing.T) {
		Eventually(t, bgTimeout, func() error {
			for _, name := range []string{"scan-1", "scan-2"} {
				cm, err := c.Kube.CoreV1().ConfigMaps(b.ns).Get(t.Context(), name, metav1.GetOptions{})
				if err != nil {
					return err
				}
				if cm.Labels["background.e2e.morph.dev/scanned"] != "true" {
					return fmt.Errorf("ConfigMap %s labels %v", name, cm.Labels)
				}
			}
			return nil
		})
		cm, err := c.Kube.CoreV1().ConfigMaps(b.ns).Get(t.Context(), "no-scan", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := cm.Labels["background.e2e.morph.dev/scanned"]; ok {
			t.Errorf("ConfigMap no-scan, which the policy does not select, was mutated: %v", cm.Labels)
		}
	})

	t.Run("subresource route", func(t *testing.T) {
		Eventually(t, bgTimeout, func() error {
			w, err := c.Dynamic.Resource(widgetGVR).Namespace(b.ns).Get(t.Context(), "w1", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if phase, _, _ := unstructured.NestedString(w.Object, "status", "phase"); phase != "mutated" {
				return fmt.Errorf("Widget w1 status %v", w.Object["status"])
			}
			return nil
		})
	})

	t.Run("trigger create update delete", func(t *testing.T) {
		// The trigger's policy must be registered before the trigger is sent.
		Eventually(t, bgTimeout, func() error {
			mc, err := getMorphMutating(t)
			if err != nil {
				return err
			}
			for _, r := range mutatingResources(mc) {
				if strings.HasPrefix(r, "configmaps@") {
					return nil
				}
			}
			return fmt.Errorf("configmaps not registered: %v", mutatingResources(mc))
		})
		secretsSay := func(op string) func() error {
			return func() error {
				for _, name := range []string{"s1", "s2"} {
					s, err := c.Kube.CoreV1().Secrets(b.ns).Get(t.Context(), name, metav1.GetOptions{})
					if err != nil {
						return err
					}
					if got := s.Annotations["background.e2e.morph.dev/trigger"]; got != op {
						return fmt.Errorf("Secret %s trigger annotation %q, want %q", name, got, op)
					}
				}
				return nil
			}
		}
		b.configMap(t, "trigger", nil)
		Eventually(t, bgTimeout, secretsSay("CREATE"))
		if _, err := b.triggers.CoreV1().ConfigMaps(b.ns).Patch(t.Context(), "trigger", types.MergePatchType, []byte(`{"data":{"v":"1"}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		Eventually(t, bgTimeout, secretsSay("UPDATE"))
		if err := b.triggers.CoreV1().ConfigMaps(b.ns).Delete(t.Context(), "trigger", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		Eventually(t, bgTimeout, secretsSay("DELETE"))
		s, err := c.Kube.CoreV1().Secrets(b.ns).Get(t.Context(), "other", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if a, ok := s.Annotations["background.e2e.morph.dev/trigger"]; ok {
			t.Errorf("Secret other, not a target, was mutated: %q", a)
		}
		b.awaitBackgroundRequestsGone(t)
		// Each of the three went through a BackgroundRequest, recorded by the replica
		// that admitted it and deleted by the leader once done.
		recorded := bgMetric(t, b, m, `morph_background_triggers_total\{outcome="recorded"\}`)
		done := bgMetric(t, b, m, `morph_background_requests_total\{outcome="done"\}`)
		t.Logf("BackgroundRequests recorded %v, done %v", recorded, done)
		if recorded < 3 || done < 3 {
			t.Errorf("BackgroundRequests recorded %v, done %v; want at least 3 each (CREATE, UPDATE, DELETE)", recorded, done)
		}
	})

	t.Run("expression target", func(t *testing.T) {
		b.configMap(t, "lister", nil)
		Eventually(t, bgTimeout, func() error {
			for _, name := range []string{"listed-1", "listed-2"} {
				cm, err := c.Kube.CoreV1().ConfigMaps(b.ns).Get(t.Context(), name, metav1.GetOptions{})
				if err != nil {
					return err
				}
				if got := cm.Annotations["background.e2e.morph.dev/listed-by"]; got != "lister" {
					return fmt.Errorf("ConfigMap %s listed-by %q", name, got)
				}
			}
			return nil
		})
		cm, err := c.Kube.CoreV1().ConfigMaps(b.ns).Get(t.Context(), "not-listed", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if a, ok := cm.Annotations["background.e2e.morph.dev/listed-by"]; ok {
			t.Errorf("ConfigMap not-listed was mutated: %q", a)
		}
	})

	if t.Failed() {
		t.Logf("morph log:\n%s", m.log)
	}
}

// bgMetric reads a counter of morph's /metrics, summed over its label sets.
func bgMetric(t *testing.T, b *bgCluster, m *clusterMorph, name string) float64 {
	t.Helper()
	client, err := clusterClient(t, b.own)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Get(m.url() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	re := regexp.MustCompile(`(?m)^` + name + `(\{[^}]*\})? ([0-9.e+]+)$`)
	for _, match := range re.FindAllStringSubmatch(string(body), -1) {
		v, _ := strconv.ParseFloat(match[2], 64)
		sum += v
	}
	return sum
}

// bgMany creates n ConfigMaps labelled many=yes.
func (b *bgCluster) bgMany(t *testing.T, n int) []string {
	t.Helper()
	names := make([]string, n)
	for i := range n {
		names[i] = fmt.Sprintf("many-%03d", i)
		b.configMap(t, names[i], map[string]string{"many": "yes"})
	}
	return names
}

// TestBackgroundNoWriteLost: while the controller mutates 200 existing ConfigMaps (the
// scan of a policy created), a second client keeps updating the same ConfigMaps'
// data; at the end every ConfigMap has both the client's last data and the policy's
// label. The conflicts the controller met are logged.
func TestBackgroundNoWriteLost(t *testing.T) {
	c := Current(t)
	b := bgSetup(t, false)
	names := b.bgMany(t, 200)
	m := b.start(t)

	// The client: rounds over every ConfigMap, each write a merge patch of data.v
	// (no read-modify-write, so it loses nothing of the controller's either), bounded
	// in rounds and time.
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	last := make([]int, len(names))
	var wg sync.WaitGroup
	started := make(chan struct{})
	var clientErr error
	wg.Go(func() {
		close(started)
		for round := 1; round <= 5 && ctx.Err() == nil; round++ {
			for i, name := range names {
				patch := fmt.Appendf(nil, `{"data":{"v":"%d"}}`, round)
				if _, err := b.triggers.CoreV1().ConfigMaps(b.ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
					if ctx.Err() != nil {
						return // out of time: the rounds so far count
					}
					clientErr = fmt.Errorf("client round %d, %s: %w", round, name, err)
					return
				}
				last[i] = round
			}
		}
	})
	<-started
	b.createPolicies(t, "many.yaml")
	wg.Wait()
	if clientErr != nil {
		t.Fatal(clientErr)
	}
	Eventually(t, 2*bgTimeout, func() error {
		l, err := c.Kube.CoreV1().ConfigMaps(b.ns).List(t.Context(), metav1.ListOptions{LabelSelector: "many=yes"})
		if err != nil {
			return err
		}
		byName := map[string]corev1.ConfigMap{}
		for _, cm := range l.Items {
			byName[cm.Name] = cm
		}
		missing := 0
		for i, name := range names {
			cm := byName[name]
			if cm.Data["v"] != strconv.Itoa(last[i]) {
				return fmt.Errorf("ConfigMap %s data.v %q, want the client's last %d", name, cm.Data["v"], last[i])
			}
			if cm.Labels["background.e2e.morph.dev/many"] != "mutated" {
				missing++
			}
		}
		if missing > 0 {
			return fmt.Errorf("%d of %d ConfigMaps lack the policy's label", missing, len(names))
		}
		return nil
	})
	t.Logf("client rounds: %d; conflicts met by the controller: %v; objects written: %v", last[0],
		bgMetric(t, b, m, "morph_background_conflicts_total"), bgMetric(t, b, m, `morph_background_work_total\{outcome="written",source="scan"\}`))
}

// TestBackgroundFailover: two replicas; the leader is killed (SIGKILL) while it scans
// the 200 ConfigMaps of a policy just created; the other replica becomes the leader,
// scans again and finishes the work.
func TestBackgroundFailover(t *testing.T) {
	c := Current(t)
	b := bgSetup(t, false)
	names := b.bgMany(t, 200)
	first := b.start(t, clusterLeaseArgs...)
	Eventually(t, bgTimeout, func() error {
		if !first.log.contains("became the leader") {
			return fmt.Errorf("the first replica does not lead yet")
		}
		return nil
	})
	second := b.start(t, clusterLeaseArgs...)

	b.createPolicies(t, "many.yaml")
	// Kill the leader once it wrote some, not all.
	Eventually(t, bgTimeout, func() error {
		if n := strings.Count(first.log.String(), "mutated an existing object"); n == 0 {
			return fmt.Errorf("the leader wrote nothing yet")
		}
		return nil
	})
	if err := first.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	written := strings.Count(first.log.String(), "mutated an existing object")
	t.Logf("the leader was killed after writing %d of %d ConfigMaps", written, len(names))
	Eventually(t, 2*bgTimeout, func() error {
		l, err := c.Kube.CoreV1().ConfigMaps(b.ns).List(t.Context(), metav1.ListOptions{LabelSelector: "many=yes"})
		if err != nil {
			return err
		}
		missing := 0
		for _, cm := range l.Items {
			if cm.Labels["background.e2e.morph.dev/many"] != "mutated" {
				missing++
			}
		}
		if missing > 0 || len(l.Items) != len(names) {
			return fmt.Errorf("%d of %d ConfigMaps lack the policy's label", missing, len(l.Items))
		}
		return nil
	})
	if !second.log.contains("became the leader") {
		t.Errorf("the second replica never led:\n%s", second.log)
	}
	t.Logf("the second replica finished: %d written by it", strings.Count(second.log.String(), "mutated an existing object"))
}
