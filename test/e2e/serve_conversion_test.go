package e2e

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

// serveCronJobGroup is the group of spec 003's CronJob.
const serveCronJobGroup = "demo.orkestra.io"

// serveCronJob is a CronJob at version (v1: schedule is a cron string, v2: an object).
func serveCronJob(version, name string, schedule any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": serveCronJobGroup + "/" + version,
		"kind":       "CronJob",
		"metadata":   map[string]any{"name": name, "labels": map[string]any{"app": "reports"}},
		"spec":       map[string]any{"schedule": schedule, "image": "reports:1.0", "suspend": false},
	}}
}

// serveConversionStats is the "conversion" member of /katalog/<entry> (spec 003).
type serveConversionStats struct {
	Enabled  bool   `json:"enabled"`
	Total    uint64 `json:"total"`
	Failures uint64 `json:"failures"`
}

// serveKatalogStats GETs /katalog/<entry> from morph's handler.
func serveKatalogStats(t *testing.T, handler http.Handler, entry string) serveConversionStats {
	t.Helper()
	rec := httptest.NewRecorder()
	handler.ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), http.MethodGet, "/katalog/"+entry, nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /katalog/%s: %d %s", entry, rec.Code, rec.Body)
	}
	var doc struct {
		Name       string               `json:"name"`
		Conversion serveConversionStats `json:"conversion"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil {
		t.Fatalf("GET /katalog/%s: %v in %s", entry, err, rec.Body)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, rec.Body.Bytes()); err == nil {
		t.Logf("GET /katalog/%s: %s", entry, compact.Bytes())
	}
	if doc.Name != entry {
		t.Errorf("GET /katalog/%s: name %q", entry, doc.Name)
	}
	return doc.Conversion
}

// TestServeKatalogConversion serves spec 003's CronJob Katalog (cronjob-v2 owning the
// paths, cronjob-v1 a participant) with morph as the conversion webhook of a two-version
// CRD (v1 stored, v2 served): an object created at v1 reads at v2 in object form,
// updates at v2 read back at v1 with the schedule exact, an object created at v2 is
// stored and read at v1, and /katalog/<entry> counts the conversions with no failure.
func TestServeKatalogConversion(t *testing.T) {
	c := Current(t)
	ns := CreateNamespace(t, "e2e-serve-convert-", nil)
	m := startServedMorph(t, filepath.Join(serveTestdata, "cronjob", "katalog.yaml"))
	if len(m.bundle.Converters) != 1 {
		t.Fatalf("compiled %d converters, want 1", len(m.bundle.Converters))
	}
	// The Katalog converts only: no admission webhook to register.
	if len(m.bundle.Mutators) != 0 || len(m.bundle.Validators) != 0 {
		t.Fatalf("compiled %d mutators and %d validators, want none", len(m.bundle.Mutators), len(m.bundle.Validators))
	}

	crd := serveCRD(t, filepath.Join(serveTestdata, "cronjob", "crd.yaml"))
	convertURL := m.url + "/convert"
	crd.Spec.Conversion.Webhook.ClientConfig = &apiextensionsv1.WebhookClientConfig{URL: &convertURL, CABundle: m.caPEM}
	CreateCRD(t, crd)

	resource := func(version string) dynamic.ResourceInterface {
		return c.Dynamic.Resource(schema.GroupVersionResource{Group: serveCronJobGroup, Version: version, Resource: "cronjobs"}).Namespace(ns.Name)
	}
	v1, v2 := resource("v1"), resource("v2")
	get := func(client dynamic.ResourceInterface, version, name string) *unstructured.Unstructured {
		t.Helper()
		got, err := client.Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("get %s at %s: %v", name, version, err)
		}
		if want := serveCronJobGroup + "/" + version; got.GetAPIVersion() != want {
			t.Errorf("get %s at %s: apiVersion %s, want %s", name, version, got.GetAPIVersion(), want)
		}
		return got
	}
	checkSpec := func(what string, got *unstructured.Unstructured, schedule any, image string) {
		t.Helper()
		want := map[string]any{"schedule": schedule, "image": image, "suspend": false}
		if spec, _, _ := unstructured.NestedMap(got.Object, "spec"); !reflect.DeepEqual(spec, want) {
			t.Errorf("%s: spec %#v, want %#v", what, spec, want)
		}
		if got.GetLabels()["app"] != "reports" {
			t.Errorf("%s: labels %v, want app=reports kept", what, got.GetLabels())
		}
	}
	cronMap := func(minute, hour, dom, month, dow string) map[string]any {
		return map[string]any{"minute": minute, "hour": hour, "dayOfMonth": dom, "month": month, "dayOfWeek": dow}
	}

	// Created at v1 (the storage version), read at v2: cronToMap.
	if _, err := v1.Create(t.Context(), serveCronJob("v1", "nightly", "0 2 * * 1-5"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create nightly at v1: %v", err)
	}
	atV2 := get(v2, "v2", "nightly")
	checkSpec("nightly at v2", atV2, cronMap("0", "2", "*", "*", "1-5"), "reports:1.0")

	// Updated at v2 without touching the schedule: stored through cronFromMap, the v1
	// string comes back exactly.
	if err := unstructured.SetNestedField(atV2.Object, "reports:1.1", "spec", "image"); err != nil {
		t.Fatal(err)
	}
	if _, err := v2.Update(t.Context(), atV2, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update nightly at v2: %v", err)
	}
	checkSpec("nightly at v1 after an image update at v2", get(v1, "v1", "nightly"), "0 2 * * 1-5", "reports:1.1")

	// Updated at v2 with a new schedule: v1 holds its cron string.
	atV2 = get(v2, "v2", "nightly")
	if err := unstructured.SetNestedField(atV2.Object, cronMap("30", "2", "*", "*", "0"), "spec", "schedule"); err != nil {
		t.Fatal(err)
	}
	if _, err := v2.Update(t.Context(), atV2, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update nightly's schedule at v2: %v", err)
	}
	checkSpec("nightly at v1 after a schedule update at v2", get(v1, "v1", "nightly"), "30 2 * * 0", "reports:1.1")
	checkSpec("nightly at v2 after a schedule update at v2", get(v2, "v2", "nightly"), cronMap("30", "2", "*", "*", "0"), "reports:1.1")

	// Created at v2: converted to v1 for storage.
	if _, err := v2.Create(t.Context(), serveCronJob("v2", "weekly", cronMap("15", "4", "*", "*", "6")), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create weekly at v2: %v", err)
	}
	checkSpec("weekly at v1", get(v1, "v1", "weekly"), "15 4 * * 6", "reports:1.0")
	checkSpec("weekly at v2", get(v2, "v2", "weekly"), cronMap("15", "4", "*", "*", "6"), "reports:1.0")

	list, err := v2.List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list at v2: %v", err)
	}
	if len(list.Items) != 2 {
		t.Errorf("list at v2: %d items, want 2", len(list.Items))
	}
	for _, item := range list.Items {
		if _, ok, _ := unstructured.NestedMap(item.Object, "spec", "schedule"); !ok {
			t.Errorf("list at v2: %s has spec %#v, want an object schedule", item.GetName(), item.Object["spec"])
		}
	}

	// Spec 003's statistics: conversions to v2 count under cronjob-v2, conversions to
	// v1 (the writes at v2) under its participant cronjob-v1.
	for _, entry := range []string{"cronjob-v2", "cronjob-v1"} {
		stats := serveKatalogStats(t, m.server.Handler(), entry)
		if !stats.Enabled || stats.Total == 0 || stats.Failures != 0 {
			t.Errorf("/katalog/%s conversion %+v, want enabled, total > 0, failures 0", entry, stats)
		}
	}
}
