package e2e

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/morph-dev/morph/test/e2e/controlplane"
)

// The install tests prove charts/morph and config/default on the real API server:
// they render (helm template, kubectl kustomize) and apply with server-side dry-run,
// compare the two, and run morph out of cluster with only the chart's RBAC, through
// a token of the chart's ServiceAccount. helm is the pinned build of
// hack/build-helm.sh ($HELM when set, as make e2e sets it).

// installTimeout bounds each helm, kubectl or morph command of the install tests.
const installTimeout = 2 * time.Minute

// installRoot is the repository root.
func installRoot(t *testing.T) string {
	t.Helper()
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatalf("find the repository root: %v", err)
	}
	return root
}

// installHelm is the pinned helm: $HELM, else hack/build-helm.sh builds or reuses it.
func installHelm(t *testing.T) string {
	t.Helper()
	if h := os.Getenv("HELM"); h != "" {
		return h
	}
	out := installRun(t, nil, filepath.Join(installRoot(t), "hack", "build-helm.sh"))
	return strings.TrimSpace(string(out))
}

// installRun runs a command in the repository root and returns its standard output;
// it fails the test when the command fails.
func installRun(t *testing.T, stdin []byte, name string, args ...string) []byte {
	t.Helper()
	out, err := installTry(t, stdin, nil, name, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// installTry runs a command in the repository root with extra environment variables.
func installTry(t *testing.T, stdin []byte, env []string, name string, args ...string) ([]byte, error) {
	t.Helper()
	// Not t.Context(): cleanups run commands too, after it ended.
	ctx, cancel := context.WithTimeout(context.Background(), installTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = installRoot(t)
	cmd.Env = append(serveEnv(), env...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), fmt.Errorf("%s %s: %v\n%s%s", filepath.Base(name), strings.Join(args, " "), err, stderr.Bytes(), stdout.Bytes())
	}
	return stdout.Bytes(), nil
}

// kubectl runs the harness's kubectl as the admin.
func kubectl(t *testing.T, stdin []byte, args ...string) []byte {
	t.Helper()
	c := Current(t)
	return installRun(t, stdin, c.ControlPlane.KubectlPath(), append([]string{"--kubeconfig", c.KubeconfigPath()}, args...)...)
}

// helmTemplate renders charts/morph as release name in namespace with the values files
// of testdata/install and --set pairs.
func helmTemplate(t *testing.T, helm, release, namespace string, values []string, set ...string) []byte {
	t.Helper()
	args := []string{"template", release, "charts/morph", "--namespace", namespace, "--include-crds"}
	for _, v := range values {
		args = append(args, "--values", filepath.Join("test", "e2e", "testdata", "install", v))
	}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	return installRun(t, nil, helm, args...)
}

// installDecode splits a YAML stream into objects (empty documents dropped).
func installDecode(t *testing.T, data []byte) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(data), -1) {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatalf("decode %q: %v", doc, err)
		}
		if len(obj) > 0 {
			out = append(out, &unstructured.Unstructured{Object: obj})
		}
	}
	return out
}

func installEncode(t *testing.T, objs []*unstructured.Unstructured) []byte {
	t.Helper()
	var buf bytes.Buffer
	for _, o := range objs {
		data, err := yaml.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		buf.WriteString("---\n")
		buf.Write(data)
	}
	return buf.Bytes()
}

// installCRD is a minimal CRD for a kind the chart may render but the harness does
// not serve (cert-manager's, the Prometheus Operator's): any content is accepted.
func installCRD(group, kind, plural, version string) *apiextensionsv1.CustomResourceDefinition {
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: plural + "." + group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: group,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Kind: kind, ListKind: kind + "List", Plural: plural, Singular: strings.ToLower(kind)},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: version, Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: new(true),
				}},
			}},
		},
	}
}

// dryRunApply applies objs with server-side apply and --dry-run=server and checks
// that kubectl reports each one.
func dryRunApply(t *testing.T, what string, data []byte) {
	t.Helper()
	objs := installDecode(t, data)
	out := kubectl(t, data, "apply", "--server-side", "--dry-run=server", "--field-manager=morph-e2e-install", "-f", "-")
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != len(objs) {
		t.Errorf("%s: kubectl applied %d objects, the rendering holds %d:\n%s", what, len(lines), len(objs), out)
	}
	for _, l := range lines {
		if !strings.HasSuffix(l, "serverside-applied (server dry run)") {
			t.Errorf("%s: %s", what, l)
		}
	}
	t.Logf("%s: %d objects applied with --dry-run=server", what, len(objs))
}

// deploymentArgs are the morph container's args of the rendered Deployment.
func deploymentArgs(t *testing.T, objs []*unstructured.Unstructured) []string {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() != "Deployment" {
			continue
		}
		containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		args, _, _ := unstructured.NestedStringSlice(containers[0].(map[string]any), "args")
		return args
	}
	t.Fatal("no Deployment rendered")
	return nil
}

// TestInstall runs the install tests on one build of morph.
func TestInstall(t *testing.T) {
	helm := installHelm(t)
	bin := serveBuildMorph(t)
	t.Run("Render", func(t *testing.T) { testInstallRender(t, helm, bin) })
	t.Run("KustomizeMatchesChart", func(t *testing.T) { testInstallKustomizeMatchesChart(t, helm) })
	t.Run("RBACMatchesDocs", func(t *testing.T) { testInstallRBACMatchesDocs(t, helm) })
	t.Run("RBAC", func(t *testing.T) { testInstallRBAC(t, helm, bin) })
	t.Run("RBACCertManager", func(t *testing.T) { testInstallRBACCertManager(t, helm, bin) })
	t.Run("KubectlPlugin", func(t *testing.T) { testInstallKubectlPlugin(t, bin) })
}

// testInstallRender renders the chart with default values and with every non-default
// option, and the kustomize base, and applies each with server-side dry-run; morph
// accepts every flag the chart passes; helm lint is clean and the schema and the chart
// refuse bad values.
func testInstallRender(t *testing.T, helm, bin string) {
	for _, crd := range []*apiextensionsv1.CustomResourceDefinition{
		installCRD("cert-manager.io", "Certificate", "certificates", "v1"),
		installCRD("cert-manager.io", "Issuer", "issuers", "v1"),
		installCRD("monitoring.coreos.com", "ServiceMonitor", "servicemonitors", "v1"),
	} {
		CreateCRD(t, crd)
	}
	ns := CreateNamespace(t, "e2e-install-", nil)
	for _, tc := range []struct {
		name   string
		values []string
		kinds  []string // kinds the rendering must hold besides the defaults' (and the CRDs)
	}{
		{"defaults", nil, []string{"Deployment", "Service", "ServiceAccount", "PodDisruptionBudget", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}},
		{"every option", []string{"values-all.yaml"}, []string{"Deployment", "Service", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Certificate", "Issuer", "ServiceMonitor"}},
		{"cert-manager with an issuer", []string{"values-issuer.yaml"}, []string{"Deployment", "Certificate", "Role", "RoleBinding"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lint := []string{"lint", "--strict", "charts/morph"}
			for _, v := range tc.values {
				lint = append(lint, "--values", filepath.Join("test", "e2e", "testdata", "install", v))
			}
			if out := installRun(t, nil, helm, lint...); !bytes.Contains(out, []byte("0 chart(s) failed")) {
				t.Errorf("helm lint:\n%s", out)
			}
			rendered := helmTemplate(t, helm, "morph", ns.Name, tc.values)
			objs := installDecode(t, rendered)
			var kinds []string
			for _, o := range objs {
				kinds = append(kinds, o.GetKind())
			}
			for _, k := range tc.kinds {
				if !slices.Contains(kinds, k) {
					t.Errorf("no %s rendered (kinds %v)", k, kinds)
				}
			}
			dryRunApply(t, tc.name, rendered)
			// morph parses every flag and value the chart gives it.
			if _, err := installTry(t, nil, nil, bin, append(deploymentArgs(t, objs), "--help")...); err != nil {
				t.Errorf("morph rejects the chart's args: %v", err)
			}
		})
	}

	for _, variant := range []string{"default", "cert-manager"} {
		t.Run("kustomize "+variant, func(t *testing.T) { testInstallKustomize(t, bin, ns.Name, variant) })
	}

	t.Run("bad values", func(t *testing.T) {
		for set, want := range map[string]string{
			"webhook.failurePolicy=Sometimes":             "failurePolicy",
			"certificates.mode=vault":                     "mode",
			"leaderElection.enabled=false":                "set replicas to 1",
			"webhook.excludeNamespaces[0]=Not_A_Label":    "excludeNamespaces",
			"logging.level=verbose":                       "level",
			"podDisruptionBudget.unknownField=1":          "unknownField",
			"leaderElection.leaseDuration=fifteen-second": "leaseDuration",
		} {
			_, err := installTry(t, nil, nil, helm, "template", "morph", "charts/morph", "--namespace", ns.Name, "--set", set)
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("--set %s: error %v; want one naming %s", set, err, want)
			}
		}
	})
}

// testInstallKustomize renders config/<variant> moved into namespace by an overlay,
// applies it with server-side dry-run, and checks that morph accepts its args.
func testInstallKustomize(t *testing.T, bin, namespace, variant string) {
	// An overlay that moves the base into the test's namespace.
	dir := t.TempDir()
	base, err := filepath.Rel(dir, filepath.Join(installRoot(t), "config", variant))
	if err != nil {
		t.Fatal(err)
	}
	overlay := fmt.Sprintf("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamespace: %s\nresources:\n- %s\n", namespace, base)
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(overlay), 0o644); err != nil {
		t.Fatal(err)
	}
	rendered := kubectl(t, nil, "kustomize", dir)
	var keep []*unstructured.Unstructured
	for _, o := range installDecode(t, rendered) {
		if o.GetKind() == "Namespace" {
			continue // morph-system, renamed or not: the test's namespace exists
		}
		keep = append(keep, o)
	}
	dryRunApply(t, "kustomize "+variant, installEncode(t, keep))
	if _, err := installTry(t, nil, nil, bin, append(deploymentArgs(t, keep), "--help")...); err != nil {
		t.Errorf("morph rejects the args of config/%s: %v", variant, err)
	}
}

// installNormalize is an object as both renderings should agree on: without the
// labels only Helm sets and, for CRDs, nothing removed.
func installNormalize(o *unstructured.Unstructured) *unstructured.Unstructured {
	o = o.DeepCopy()
	labels := o.GetLabels()
	for _, k := range []string{"helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/version"} {
		if k == "app.kubernetes.io/managed-by" && labels[k] == "morph" {
			continue // the CRDs' own label
		}
		delete(labels, k)
	}
	if len(labels) == 0 {
		unstructured.RemoveNestedField(o.Object, "metadata", "labels")
	} else {
		o.SetLabels(labels)
	}
	return o
}

// testInstallKustomizeMatchesChart: each kustomize variant renders the objects of the
// chart with the values it stands for, in morph-system, the same but for Helm's labels,
// plus the Namespace: config/default the defaults, config/cert-manager
// certificates.mode=cert-manager.
func testInstallKustomizeMatchesChart(t *testing.T, helm string) {
	for _, tc := range []struct {
		dir string
		set []string
	}{
		{"default", nil},
		{"cert-manager", []string{"certificates.mode=cert-manager"}},
	} {
		t.Run(tc.dir, func(t *testing.T) {
			chart := map[string]*unstructured.Unstructured{}
			for _, o := range installDecode(t, helmTemplate(t, helm, "morph", "morph-system", nil, tc.set...)) {
				chart[o.GetKind()+"/"+o.GetNamespace()+"/"+o.GetName()] = installNormalize(o)
			}
			base := map[string]*unstructured.Unstructured{}
			for _, o := range installDecode(t, kubectl(t, nil, "kustomize", filepath.Join(installRoot(t), "config", tc.dir))) {
				base[o.GetKind()+"/"+o.GetNamespace()+"/"+o.GetName()] = installNormalize(o)
			}
			if _, ok := base["Namespace//morph-system"]; !ok {
				t.Errorf("config/%s has no Namespace morph-system", tc.dir)
			}
			delete(base, "Namespace//morph-system")
			for key, want := range chart {
				got, ok := base[key]
				if !ok {
					t.Errorf("%s: rendered by the chart, not by config/%s", key, tc.dir)
					continue
				}
				if !apiequality.Semantic.DeepEqual(got.Object, want.Object) {
					g, _ := yaml.Marshal(got.Object)
					w, _ := yaml.Marshal(want.Object)
					t.Errorf("%s differs; config/%s:\n%s\nchart:\n%s", key, tc.dir, g, w)
				}
			}
			for key := range base {
				if _, ok := chart[key]; !ok {
					t.Errorf("%s: rendered by config/%s, not by the chart", key, tc.dir)
				}
			}
			t.Logf("config/%s: %d objects compared", tc.dir, len(chart))
		})
	}
}

// docsRBAC reads the rules of the "### RBAC" sections of docs/cluster.md: the first
// yaml block after each heading, either a bare rules list (the policies' ClusterRole)
// or ClusterRole and Role objects (the webhooks'), by the names the chart gives them.
func docsRBAC(t *testing.T) map[string][]rbacv1.PolicyRule {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(installRoot(t), "docs", "cluster.md"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]rbacv1.PolicyRule{}
	sections := strings.Split(string(data), "\n### RBAC\n")
	for _, sec := range sections[1:] {
		_, rest, ok := strings.Cut(sec, "```yaml\n")
		if !ok {
			t.Fatalf("docs/cluster.md: an RBAC section without a yaml block")
		}
		block, _, _ := strings.Cut(rest, "```")
		for _, o := range installDecode(t, []byte(block)) {
			var rules struct {
				Rules []rbacv1.PolicyRule `json:"rules"`
			}
			raw, _ := yaml.Marshal(o.Object)
			if err := yaml.Unmarshal(raw, &rules); err != nil {
				t.Fatal(err)
			}
			switch o.GetKind() {
			case "":
				out["ClusterRole/morph-policies"] = rules.Rules
			default:
				out[o.GetKind()+"/"+o.GetName()] = rules.Rules
			}
		}
	}
	return out
}

// testInstallRBACMatchesDocs: the chart's roles hold exactly the rules docs/cluster.md
// documents, in its order.
func testInstallRBACMatchesDocs(t *testing.T, helm string) {
	want := docsRBAC(t)
	if len(want) != 3 {
		t.Fatalf("docs/cluster.md documents %d roles, want 3: %v", len(want), want)
	}
	for _, o := range installDecode(t, helmTemplate(t, helm, "morph", "morph-system", nil)) {
		if o.GetKind() != "ClusterRole" && o.GetKind() != "Role" {
			continue
		}
		key := o.GetKind() + "/" + o.GetName()
		var got struct {
			Rules []rbacv1.PolicyRule `json:"rules"`
		}
		raw, _ := yaml.Marshal(o.Object)
		if err := yaml.Unmarshal(raw, &got); err != nil {
			t.Fatal(err)
		}
		w, ok := want[key]
		if !ok {
			t.Errorf("the chart renders %s, which docs/cluster.md does not document", key)
			continue
		}
		delete(want, key)
		if !apiequality.Semantic.DeepEqual(got.Rules, w) {
			g, _ := yaml.Marshal(got.Rules)
			d, _ := yaml.Marshal(w)
			t.Errorf("%s: the chart's rules differ from docs/cluster.md; chart:\n%s\ndocs:\n%s", key, g, d)
		}
	}
	for key := range want {
		t.Errorf("docs/cluster.md documents %s, the chart does not render it", key)
	}
}

// installKubeconfig writes a kubeconfig for the harness's API server that
// authenticates with token.
func installKubeconfig(t *testing.T, token string) string {
	t.Helper()
	cfg := Current(t).Config()
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: morph
  user:
    token: %s
contexts:
- name: e2e
  context: {cluster: e2e, user: morph}
current-context: e2e
`, cfg.Host, base64.StdEncoding.EncodeToString(cfg.CAData), token)
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// installMetric is the sum of the samples of a metric whose line contains match.
func installMetric(t *testing.T, client *http.Client, base, name, match string) (float64, error) {
	t.Helper()
	resp, err := client.Get(base + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	var sum float64
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, name) && strings.Contains(line, match) {
			var v float64
			if _, err := fmt.Sscan(line[strings.LastIndex(line, " ")+1:], &v); err == nil {
				sum += v
			}
		}
	}
	return sum, nil
}

// installChartRBAC applies the chart's ServiceAccount, roles and bindings (of release
// in namespace, with the values files) for real, checks there are count of them, and
// returns a kubeconfig with a token of the ServiceAccount from the TokenRequest API, as
// a Pod would get it.
func installChartRBAC(t *testing.T, helm, release, namespace string, values []string, count int) string {
	t.Helper()
	c := Current(t)
	var rbac []*unstructured.Unstructured
	for _, o := range installDecode(t, helmTemplate(t, helm, release, namespace, values)) {
		switch o.GetKind() {
		case "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding":
			rbac = append(rbac, o)
		}
	}
	if len(rbac) != count {
		t.Fatalf("the chart renders %d RBAC objects, want %d", len(rbac), count)
	}
	rbacYAML := installEncode(t, rbac)
	kubectl(t, rbacYAML, "apply", "--server-side", "--field-manager=morph-e2e-install", "-f", "-")
	t.Cleanup(func() {
		out, err := installTry(t, rbacYAML, nil, c.ControlPlane.KubectlPath(), "--kubeconfig", c.KubeconfigPath(), "delete", "--ignore-not-found", "-f", "-")
		if err != nil {
			t.Errorf("cleanup: %v\n%s", err, out)
		}
	})
	tr, err := c.Kube.CoreV1().ServiceAccounts(namespace).CreateToken(t.Context(), release, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: new(int64(3600))},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("TokenRequest for ServiceAccount %s/%s: %v", namespace, release, err)
	}
	return installKubeconfig(t, tr.Status.Token)
}

// installStartMorph starts morph with args plus --addr and --webhook-url on a free port
// and waits until /readyz answers 200 to client().
func installStartMorph(t *testing.T, bin string, client func() (*http.Client, error), args ...string) (*serveProcess, string) {
	t.Helper()
	for try := 1; ; try++ {
		addr := serveFreeAddr(t)
		p := serveStart(t, bin, append(slices.Clone(args), "--addr", addr, "--webhook-url", "https://"+addr)...)
		err := poll(t.Context(), serveReadyTimeout, func() error {
			select {
			case <-p.done:
				return fmt.Errorf("morph exited: %v", p.waitErr)
			default:
			}
			c, err := client()
			if err != nil {
				return err
			}
			resp, err := c.Get("https://" + addr + "/readyz")
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("/readyz: %s", resp.Status)
			}
			return nil
		})
		if err == nil {
			return p, addr
		}
		if try >= serveStartTries || !p.log.contains("address already in use") {
			t.Fatalf("morph %s: %v\n%s", strings.Join(args, " "), err, p.log)
		}
	}
}

// installAssign creates the Assign of testdata/cluster/policies.yaml for namespace
// apps, named name, and waits until its status says Ready=True.
func installAssign(t *testing.T, name, apps string) {
	t.Helper()
	c := Current(t)
	data, err := os.ReadFile(filepath.Join("testdata", "cluster", "policies.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var assign *unstructured.Unstructured
	for _, o := range clusterDecode(t, bytes.ReplaceAll(data, []byte("NAMESPACE"), []byte(apps))) {
		if o.GetKind() == "Assign" {
			assign = o
		}
	}
	assign.SetName(name)
	assigns := c.Dynamic.Resource(assignGVR)
	if _, err := assigns.Create(t.Context(), assign, metav1.CreateOptions{FieldValidation: "Strict"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := cleanupContext()
		defer cancel()
		_ = assigns.Delete(ctx, name, metav1.DeleteOptions{})
	})
	clusterAwaitReady(t, assigns, name, "True", "Compiled")
}

// testInstallRBAC: the chart's ServiceAccount, Roles and bindings are applied for real;
// morph runs out of cluster with a token of that ServiceAccount (TokenRequest API),
// leader election on, its own certificate Secret and the chart's webhook overrides,
// and the cluster scenario works:
// a policy created through the API is compiled (Ready=True), the webhook configuration
// is registered with the Secret's caBundle, and a ConfigMap is mutated. Then the status
// permission is removed from the ClusterRole: morph logs the forbidden write and counts
// it, and keeps serving and mutating (no crash, no restart). Then Lease update is
// removed from the Role: the leader logs the forbidden renewal and stops leading, and
// morph keeps serving.
func testInstallRBAC(t *testing.T, helm, bin string) {
	c := Current(t)
	const release = "e2e-install-morph" // the objects are named after it; the ServiceAccount too

	for _, crd := range clusterDecodeCRDs(t, serveRunMorph(t, bin, "generate", "crds")) {
		CreateCRD(t, crd)
	}
	ns := CreateNamespace(t, "e2e-install-", nil)   // morph's namespace
	apps := CreateNamespace(t, "e2e-install-", nil) // the objects mutated
	deleteClusterConfigs(t)

	kubeconfig := installChartRBAC(t, helm, release, ns.Name, nil, 7)
	p, addr := installStartMorph(t, bin, func() (*http.Client, error) { return clusterClient(t, ns.Name) },
		append([]string{"serve", "--kubeconfig", kubeconfig, "--namespace", ns.Name, "--log-level", "debug",
			"--webhook-failure-policy", "Ignore", "--exclude-namespace", "e2e-install-excluded"}, clusterLeaseArgs...)...)
	if p.log.contains("forbidden") {
		t.Errorf("morph was refused something with the chart's RBAC:\n%s", p.log)
	}
	lease, err := c.Kube.CoordinationV1().Leases(ns.Name).Get(t.Context(), "morph", metav1.GetOptions{})
	if err != nil || lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
		t.Errorf("Lease morph: %v %+v", err, lease)
	}

	// The cluster scenario: an Assign through the API, registered, compiled, mutating.
	installAssign(t, "e2e-install-configmap-team", apps.Name)
	assigns := c.Dynamic.Resource(assignGVR)
	assign := &unstructured.Unstructured{}
	assign.SetName("e2e-install-configmap-team")
	awaitRegistration(t, ns.Name, clusterTimeout, "configmaps@https://"+addr+"/mutate")
	// The chart's webhook.failurePolicy and webhook.excludeNamespaces, as flags.
	if m, err := getMorphMutating(t); err != nil {
		t.Fatal(err)
	} else {
		for _, w := range m.Webhooks {
			if *w.FailurePolicy != "Ignore" || !slices.Contains(w.NamespaceSelector.MatchExpressions[0].Values, "e2e-install-excluded") ||
				!slices.Contains(w.NamespaceSelector.MatchExpressions[0].Values, ns.Name) {
				t.Errorf("webhook %s: failurePolicy %s, namespaceSelector %v", w.Name, *w.FailurePolicy, w.NamespaceSelector)
			}
		}
	}
	seq := 0
	team := func() (string, error) {
		seq++
		cm, err := c.Kube.CoreV1().ConfigMaps(apps.Name).Create(t.Context(), &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", seq)},
		}, metav1.CreateOptions{})
		if err != nil {
			return "", err
		}
		return cm.Data["team"], nil
	}
	clusterAwait(t, "a ConfigMap mutated by the Assign", func() error {
		if v, err := team(); err != nil || v != "gatekeeper-v1" {
			return fmt.Errorf("data.team %q, error %v", v, err)
		}
		return nil
	})
	if p.log.contains("forbidden") {
		t.Errorf("morph was refused something with the chart's RBAC:\n%s", p.log)
	}

	// Take the status permission away: the status write is refused, said and counted.
	role, err := c.Kube.RbacV1().ClusterRoles().Get(t.Context(), release+"-policies", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kept := role.Rules[:0]
	for _, r := range role.Rules {
		if !slices.Contains(r.Resources, "assign/status") {
			kept = append(kept, r)
		}
	}
	role.Rules = kept
	if _, err := c.Kube.RbacV1().ClusterRoles().Update(t.Context(), role, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	client, err := clusterClient(t, ns.Name)
	if err != nil {
		t.Fatal(err)
	}
	before, err := installMetric(t, client, "https://"+addr, "morph_cluster_status_writes_total", `outcome="failure"`)
	if err != nil {
		t.Fatal(err)
	}
	clusterUpdate(t, assigns, assign.GetName(), func(o *unstructured.Unstructured) {
		_ = unstructured.SetNestedField(o.Object, "gatekeeper-v2", "spec", "parameters", "assign", "value")
	})
	clusterAwait(t, "the forbidden status write logged and counted", func() error {
		if !p.log.contains("writing policy status") || !p.log.contains("forbidden") {
			return fmt.Errorf("no log line of the forbidden status write")
		}
		n, err := installMetric(t, client, "https://"+addr, "morph_cluster_status_writes_total", `outcome="failure"`)
		if err != nil {
			return err
		}
		if n <= before {
			return fmt.Errorf("morph_cluster_status_writes_total{outcome=\"failure\"} = %v, was %v", n, before)
		}
		return nil
	})
	// morph keeps serving: the changed Assign mutates, the process runs, /readyz is 200.
	clusterAwait(t, "a ConfigMap mutated by the changed Assign", func() error {
		if v, err := team(); err != nil || v != "gatekeeper-v2" {
			return fmt.Errorf("data.team %q, error %v", v, err)
		}
		return nil
	})
	select {
	case <-p.done:
		t.Fatalf("morph exited after the permission was removed: %v", p.waitErr)
	default:
	}
	resp, err := client.Get("https://" + addr + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/readyz %s after the permission was removed", resp.Status)
	}
	for _, line := range strings.Split(p.log.String(), "\n") {
		if strings.Contains(line, "writing policy status") {
			t.Logf("morph says: %s", line)
			break
		}
	}

	// Take Lease update away from the Role: the leader cannot renew, says so, stops its
	// writers and stands for election again; it keeps serving.
	nsRole, err := c.Kube.RbacV1().Roles(ns.Name).Get(t.Context(), release+"-webhooks", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range nsRole.Rules {
		if slices.Contains(r.Resources, "leases") && slices.Contains(r.Verbs, "update") {
			nsRole.Rules[i].Verbs = slices.DeleteFunc(slices.Clone(r.Verbs), func(v string) bool { return v == "update" })
		}
	}
	if _, err := c.Kube.RbacV1().Roles(ns.Name).Update(t.Context(), nsRole, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	clusterAwait(t, "the leader stops leading on a forbidden Lease renewal", func() error {
		if !p.log.contains(`leases.coordination.k8s.io \"morph\" is forbidden`) {
			return fmt.Errorf("no log line of the forbidden Lease update")
		}
		if !p.log.contains("stopped leading: cluster writers stopped") {
			return fmt.Errorf("still leading")
		}
		n, err := installMetric(t, client, "https://"+addr, "morph_leader_is_leader", "")
		if err != nil {
			return err
		}
		if n != 0 {
			return fmt.Errorf("morph_leader_is_leader %v", n)
		}
		return nil
	})
	if v, err := team(); err != nil || v != "gatekeeper-v2" {
		t.Errorf("without the Lease, a new ConfigMap has data.team %q (error %v), want gatekeeper-v2", v, err)
	}
	select {
	case <-p.done:
		t.Fatalf("morph exited after Lease update was removed: %v", p.waitErr)
	default:
	}
	said := map[string]bool{}
	for _, line := range strings.Split(p.log.String(), "\n") {
		if strings.Contains(line, "level=ERROR") && strings.Contains(line, "lease") || strings.Contains(line, "stopped leading") {
			if _, msg, ok := strings.Cut(line, "msg="); ok && !said[msg[:min(len(msg), 40)]] {
				said[msg[:min(len(msg), 40)]] = true
				t.Logf("morph says: %s", line)
			}
		}
	}
}

// testInstallKubectlPlugin: installed as kubectl-morph on PATH, morph runs as
// `kubectl morph` and its usage says so.
func testInstallKubectlPlugin(t *testing.T, bin string) {
	c := Current(t)
	dir := t.TempDir()
	plugin := filepath.Join(dir, "kubectl-morph")
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(plugin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	path := "PATH=" + dir + string(os.PathListSeparator) + os.Getenv("PATH")
	out, err := installTry(t, nil, []string{path}, c.ControlPlane.KubectlPath(), "morph", "version")
	if err != nil || !strings.HasPrefix(string(out), "morph ") {
		t.Errorf("kubectl morph version: %q, %v", out, err)
	}
	out, err = installTry(t, nil, []string{path}, c.ControlPlane.KubectlPath(), "morph", "apply", "--help")
	if err != nil || !strings.Contains(string(out), "kubectl morph apply -p POLICY") {
		t.Errorf("kubectl morph apply --help does not say kubectl morph: %v\n%s", err, out)
	}
	out, err = installTry(t, nil, []string{path}, c.ControlPlane.KubectlPath(), "plugin", "list")
	if err != nil || !strings.Contains(string(out), plugin) {
		t.Errorf("kubectl plugin list does not show %s: %v\n%s", plugin, err, out)
	}
}

// testInstallRBACCertManager: with certificates.mode=cert-manager the chart's Role has
// no Secret rule; morph, as the chart's ServiceAccount, serves the pair of a read-only
// --cert-dir (as cert-manager's Secret is mounted: ca.crt, tls.crt, tls.key), registers
// its ca.crt as the caBundle, and the cluster scenario works.
func testInstallRBACCertManager(t *testing.T, helm, bin string) {
	c := Current(t)
	const release = "e2e-install-cm-morph"
	for _, crd := range clusterDecodeCRDs(t, serveRunMorph(t, bin, "generate", "crds")) {
		CreateCRD(t, crd)
	}
	ns := CreateNamespace(t, "e2e-install-", nil)
	apps := CreateNamespace(t, "e2e-install-", nil)
	deleteClusterConfigs(t)
	kubeconfig := installChartRBAC(t, helm, release, ns.Name, []string{"values-issuer.yaml"}, 7)
	role, err := c.Kube.RbacV1().Roles(ns.Name).Get(t.Context(), release+"-webhooks", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range role.Rules {
		if slices.Contains(r.Resources, "secrets") {
			t.Errorf("with cert-manager the Role still grants %v on secrets", r.Verbs)
		}
	}

	// What cert-manager writes into the Secret (its own CA, not morph's), mounted
	// read-only: the files must be left as they are.
	certs := t.TempDir()
	caPEM, certPEM, keyPEM := installIssue(t)
	files := map[string][]byte{"ca.crt": caPEM, "tls.crt": certPEM, "tls.key": keyPEM}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(certs, name), data, 0o400); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		entries, _ := os.ReadDir(certs)
		if len(entries) != len(files) {
			t.Errorf("morph wrote into the certificate folder: %v", entries)
		}
		for name, data := range files {
			if got, err := os.ReadFile(filepath.Join(certs, name)); err != nil || !bytes.Equal(got, data) {
				t.Errorf("morph changed %s (%v)", name, err)
			}
		}
	})
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		Proxy: nil, DisableKeepAlives: true,
		TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12},
	}}
	p, addr := installStartMorph(t, bin, func() (*http.Client, error) { return client, nil },
		append([]string{"serve", "--kubeconfig", kubeconfig, "--namespace", ns.Name, "--cert-dir", certs, "--log-level", "debug"}, clusterLeaseArgs...)...)

	installAssign(t, "e2e-install-cm-configmap-team", apps.Name)
	clusterAwait(t, "the webhook registered with the mounted ca.crt", func() error {
		m, err := getMorphMutating(t)
		if err != nil {
			return err
		}
		if got := mutatingResources(m); !slices.Equal(got, []string{"configmaps@https://" + addr + "/mutate"}) {
			return fmt.Errorf("registered %v", got)
		}
		for _, w := range m.Webhooks {
			if !bytes.Equal(w.ClientConfig.CABundle, caPEM) {
				return fmt.Errorf("webhook %s: caBundle is not the mounted ca.crt", w.Name)
			}
		}
		return nil
	})
	seq := 0
	clusterAwait(t, "a ConfigMap mutated by the Assign", func() error {
		seq++
		cm, err := c.Kube.CoreV1().ConfigMaps(apps.Name).Create(t.Context(), &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", seq)},
		}, metav1.CreateOptions{})
		if err != nil || cm.Data["team"] != "gatekeeper-v1" {
			return fmt.Errorf("data %v, error %v", cm.Data, err)
		}
		return nil
	})
	if p.log.contains("forbidden") {
		t.Errorf("morph was refused something with the chart's cert-manager RBAC:\n%s", p.log)
	}
	if _, err := c.Kube.CoreV1().Secrets(ns.Name).Get(t.Context(), clusterSecret, metav1.GetOptions{}); err == nil {
		t.Errorf("morph made Secret %s with certificates given from outside", clusterSecret)
	}
}

// installIssue makes a CA (as cert-manager's CA Issuer would have one) and a serving
// certificate for 127.0.0.1 signed by it, in PEM.
func installIssue(t *testing.T) (caPEM, certPEM, keyPEM []byte) {
	t.Helper()
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "e2e-install cert-manager CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:    x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caTmpl, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
}
