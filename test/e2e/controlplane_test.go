package e2e

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestControlPlane checks that the API server is up, reports the expected
// version and stores and returns a namespace.
func TestControlPlane(t *testing.T) {
	c := Current(t)

	v, err := c.Kube.Discovery().ServerVersion()
	if err != nil {
		t.Fatalf("server version: %v", err)
	}
	t.Logf("kube-apiserver %s at %s", v.GitVersion, c.Config().Host)
	if v.Major != "1" || v.Minor != "37" {
		t.Errorf("server version = %s (major %q, minor %q), want 1.37", v.GitVersion, v.Major, v.Minor)
	}

	ns := CreateNamespace(t, "e2e-controlplane-", map[string]string{"morph.dev/e2e": "controlplane"})
	got, err := c.Kube.CoreV1().Namespaces().Get(t.Context(), ns.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get namespace %s: %v", ns.Name, err)
	}
	if got.UID != ns.UID || got.Labels["morph.dev/e2e"] != "controlplane" {
		t.Errorf("namespace read back = uid %s labels %v, want uid %s with label morph.dev/e2e=controlplane", got.UID, got.Labels, ns.UID)
	}
}
