package e2e

import (
	"os"
	"path/filepath"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/morph-dev/morph/internal/dialect/gatekeeper"
	"github.com/morph-dev/morph/internal/objects"
	"github.com/morph-dev/morph/internal/policy"
	"github.com/morph-dev/morph/internal/webhook"
)

// serveConfigMapPolicies are Gatekeeper mutators of ConfigMaps: a label and a data key.
const serveConfigMapPolicies = `apiVersion: mutations.gatekeeper.sh/v1
kind: AssignMetadata
metadata: {name: configmap-owner}
spec:
  match:
    kinds: [{apiGroups: [""], kinds: [ConfigMap]}]
  location: metadata.labels."e2e.morph.dev/owner"
  parameters:
    assign: {value: platform}
---
apiVersion: mutations.gatekeeper.sh/v1
kind: Assign
metadata: {name: configmap-mutated}
spec:
  applyTo: [{groups: [""], versions: [v1], kinds: [ConfigMap]}]
  match:
    kinds: [{apiGroups: [""], kinds: [ConfigMap]}]
  location: data.mutated
  parameters:
    assign: {value: "yes"}
`

// TestServeMutatesThroughGeneratedConfiguration serves Gatekeeper policies with morph's
// webhook server, registers the MutatingWebhookConfiguration morph generates for them,
// and checks that the API server stores the mutated objects.
func TestServeMutatesThroughGeneratedConfiguration(t *testing.T) {
	c := Current(t)
	ns := CreateNamespace(t, "e2e-serve-", nil)

	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "configmaps.yaml"), []byte(serveConfigMapPolicies), 0o644); err != nil {
		t.Fatal(err)
	}
	source := &webhook.FolderSource{Policies: dir, NewLoader: func(store *objects.Store) *policy.Loader {
		return policy.NewLoader(gatekeeper.New(gatekeeper.Options{Objects: store}))
	}}
	server, err := webhook.New(webhook.Options{Source: source, Admission: true, Conversion: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := server.Reload(); err != nil {
		t.Fatalf("loading the policies: %v", err)
	}
	url, caPEM := StartWebhookServer(t, server.Handler())

	snap, err := source.Load()
	if err != nil {
		t.Fatal(err)
	}
	mutating, validating, err := webhook.Configurations(snap.Bundle, webhook.ConfigOptions{
		Name: "e2e-serve", Namespace: "morph-system", URL: url, CABundle: caPEM,
	})
	if err != nil {
		t.Fatal(err)
	}
	if mutating == nil || validating != nil {
		t.Fatalf("configurations: mutating %v, validating %v; want only a mutating one", mutating != nil, validating != nil)
	}
	// Keep the test to its own namespace: other tests share the cluster.
	for i := range mutating.Webhooks {
		sel := mutating.Webhooks[i].NamespaceSelector
		sel.MatchExpressions = append(sel.MatchExpressions, metav1.LabelSelectorRequirement{
			Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpIn, Values: []string{ns.Name},
		})
	}
	if got := mutating.Webhooks[0].Rules[0].Resources; len(got) != 1 || got[0] != "configmaps" {
		t.Fatalf("rules = %+v, want configmaps", mutating.Webhooks[0].Rules)
	}
	CreateMutatingWebhookConfiguration(t, mutating)

	configMaps := c.Kube.CoreV1().ConfigMaps(ns.Name)
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "served", Labels: map[string]string{"app": "e2e"}},
		Data:       map[string]string{"k": "v"},
	}
	created, err := configMaps.Create(t.Context(), cm, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create ConfigMap: %v", err)
	}
	if created.Labels["e2e.morph.dev/owner"] != "platform" || created.Labels["app"] != "e2e" || created.Data["mutated"] != "yes" || created.Data["k"] != "v" {
		t.Errorf("created ConfigMap: labels %v, data %v; want the policies' label and data added", created.Labels, created.Data)
	}

	// An update that removes the data key gets it back (the policies run on UPDATE).
	created.Data = map[string]string{"k": "v2"}
	updated, err := configMaps.Update(t.Context(), created, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("update ConfigMap: %v", err)
	}
	if updated.Data["mutated"] != "yes" || updated.Data["k"] != "v2" {
		t.Errorf("updated data %v, want k=v2 and mutated=yes", updated.Data)
	}

	// A dry-run create is mutated too, and stores nothing.
	dry := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "dry"}}
	answer, err := configMaps.Create(t.Context(), dry, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		t.Fatalf("dry-run create: %v", err)
	}
	if answer.Data["mutated"] != "yes" {
		t.Errorf("dry-run answer data %v, want mutated=yes", answer.Data)
	}
	if _, err := configMaps.Get(t.Context(), "dry", metav1.GetOptions{}); err == nil {
		t.Error("the dry-run ConfigMap was stored")
	}
	if mutating.Webhooks[0].FailurePolicy == nil || *mutating.Webhooks[0].FailurePolicy != admissionregistrationv1.Ignore {
		t.Errorf("failurePolicy %v, want Ignore for Gatekeeper mutators", mutating.Webhooks[0].FailurePolicy)
	}
}
