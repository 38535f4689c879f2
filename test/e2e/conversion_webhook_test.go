package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

const backupGroup = "e2e.morph.dev"

// scheduleFields are the v2 names of the five fields of a v1 cron schedule.
var scheduleFields = []string{"minute", "hour", "dayOfMonth", "month", "dayOfWeek"}

// TestConversionWebhook checks that the API server calls a CRD conversion
// webhook served by StartWebhookServer: Backup stores v1 (spec.schedule is a
// cron string) and also serves v2 (spec.schedule is an object).
func TestConversionWebhook(t *testing.T) {
	c := Current(t)
	ns := CreateNamespace(t, "e2e-conversion-", nil)

	var calls atomic.Int32
	handler := convertScheduleHandler(&calls) // the webhook under test
	url, caPEM := StartWebhookServer(t, handler)
	CreateCRD(t, backupCRD(url+"/convert", caPEM))

	v1 := c.Dynamic.Resource(schema.GroupVersionResource{Group: backupGroup, Version: "v1", Resource: "backups"}).Namespace(ns.Name)
	v2 := c.Dynamic.Resource(schema.GroupVersionResource{Group: backupGroup, Version: "v2", Resource: "backups"}).Namespace(ns.Name)

	// v1 -> v2
	nightly := backup("v1", "nightly", "30 2 * * 1-5")
	if _, err := v1.Create(t.Context(), nightly, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create v1 Backup: %v", err)
	}
	got, err := v2.Get(t.Context(), "nightly", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get nightly at v2: %v", err)
	}
	wantV2 := map[string]any{"minute": "30", "hour": "2", "dayOfMonth": "*", "month": "*", "dayOfWeek": "1-5"}
	if s, _, _ := unstructured.NestedFieldNoCopy(got.Object, "spec", "schedule"); !reflect.DeepEqual(s, wantV2) || got.GetAPIVersion() != backupGroup+"/v2" {
		t.Errorf("nightly at v2: apiVersion %s, spec.schedule %#v; want %s/v2, %#v", got.GetAPIVersion(), s, backupGroup, wantV2)
	}

	// v2 -> v1 (stored as v1, so the create itself converts)
	hourly := backup("v2", "hourly", map[string]any{"minute": "0", "hour": "*", "dayOfMonth": "*", "month": "*", "dayOfWeek": "*"})
	if _, err := v2.Create(t.Context(), hourly, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create v2 Backup: %v", err)
	}
	got, err = v1.Get(t.Context(), "hourly", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get hourly at v1: %v", err)
	}
	if s, _, _ := unstructured.NestedString(got.Object, "spec", "schedule"); s != "0 * * * *" {
		t.Errorf("hourly at v1: spec.schedule %q, want %q", s, "0 * * * *")
	}

	list, err := v2.List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list at v2: %v", err)
	}
	for _, item := range list.Items {
		if _, ok, _ := unstructured.NestedMap(item.Object, "spec", "schedule"); !ok {
			t.Errorf("list at v2: %s has spec.schedule %#v, want an object", item.GetName(), item.Object["spec"])
		}
	}
	if len(list.Items) != 2 {
		t.Errorf("list at v2 returned %d items, want 2", len(list.Items))
	}
	if calls.Load() == 0 {
		t.Error("the conversion webhook was never called")
	}
}

func backup(version, name string, schedule any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": backupGroup + "/" + version,
		"kind":       "Backup",
		"metadata":   map[string]any{"name": name},
		"spec":       map[string]any{"schedule": schedule},
	}}
}

// backupCRD is a two-version CRD: v1 (storage) and v2 (served), converted by
// the webhook at url.
func backupCRD(url string, caPEM []byte) *apiextensionsv1.CustomResourceDefinition {
	str := apiextensionsv1.JSONSchemaProps{Type: "string"}
	v2Schedule := apiextensionsv1.JSONSchemaProps{Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{}}
	for _, f := range scheduleFields {
		v2Schedule.Properties[f] = str
	}
	schemaWith := func(schedule apiextensionsv1.JSONSchemaProps) *apiextensionsv1.CustomResourceValidation {
		return &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
			Type: "object",
			Properties: map[string]apiextensionsv1.JSONSchemaProps{
				"spec": {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{"schedule": schedule}},
			},
		}}
	}
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "backups." + backupGroup},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: backupGroup,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "backups", Singular: "backup", Kind: "Backup", ListKind: "BackupList"},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{
				{Name: "v1", Served: true, Storage: true, Schema: schemaWith(str)},
				{Name: "v2", Served: true, Storage: false, Schema: schemaWith(v2Schedule)},
			},
			Conversion: &apiextensionsv1.CustomResourceConversion{
				Strategy: apiextensionsv1.WebhookConverter,
				Webhook: &apiextensionsv1.WebhookConversion{
					ClientConfig:             &apiextensionsv1.WebhookClientConfig{URL: &url, CABundle: caPEM},
					ConversionReviewVersions: []string{"v1"},
				},
			},
		},
	}
}

// convertScheduleHandler is a CRD conversion webhook
// (apiextensions.k8s.io/v1 ConversionReview) for Backup: v1 spec.schedule
// "m h dom mon dow" <-> v2 spec.schedule {minute, hour, dayOfMonth, month,
// dayOfWeek}. It counts its calls.
func convertScheduleHandler(calls *atomic.Int32) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		var review apiextensionsv1.ConversionReview
		if err := json.NewDecoder(io.LimitReader(r.Body, 8<<20)).Decode(&review); err != nil || review.Request == nil {
			http.Error(w, fmt.Sprintf("decode ConversionReview: %v", err), http.StatusBadRequest)
			return
		}
		resp := &apiextensionsv1.ConversionResponse{UID: review.Request.UID, Result: metav1.Status{Status: metav1.StatusSuccess}}
		for _, raw := range review.Request.Objects {
			out, err := convertBackup(raw.Raw, review.Request.DesiredAPIVersion)
			if err != nil {
				resp.ConvertedObjects = nil
				resp.Result = metav1.Status{Status: metav1.StatusFailure, Message: err.Error()}
				break
			}
			resp.ConvertedObjects = append(resp.ConvertedObjects, runtime.RawExtension{Raw: out})
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(apiextensionsv1.ConversionReview{
			TypeMeta: metav1.TypeMeta{APIVersion: "apiextensions.k8s.io/v1", Kind: "ConversionReview"},
			Response: resp,
		})
	})
}

func convertBackup(raw []byte, desired string) ([]byte, error) {
	var obj unstructured.Unstructured
	if err := obj.UnmarshalJSON(raw); err != nil {
		return nil, fmt.Errorf("decode object: %w", err)
	}
	from := obj.GetAPIVersion()
	schedule, found, _ := unstructured.NestedFieldCopy(obj.Object, "spec", "schedule")
	if found && from != desired {
		switch desired {
		case backupGroup + "/v2":
			s, ok := schedule.(string)
			parts := strings.Fields(s)
			if !ok || len(parts) != len(scheduleFields) {
				return nil, fmt.Errorf("%s: spec.schedule %#v is not a five-field cron string", obj.GetName(), schedule)
			}
			m := map[string]any{}
			for i, f := range scheduleFields {
				m[f] = parts[i]
			}
			schedule = m
		case backupGroup + "/v1":
			m, ok := schedule.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("%s: spec.schedule %#v is not an object", obj.GetName(), schedule)
			}
			parts := make([]string, len(scheduleFields))
			for i, f := range scheduleFields {
				v, _ := m[f].(string)
				if v == "" {
					v = "*"
				}
				parts[i] = v
			}
			schedule = strings.Join(parts, " ")
		default:
			return nil, fmt.Errorf("cannot convert to %s", desired)
		}
		if err := unstructured.SetNestedField(obj.Object, schedule, "spec", "schedule"); err != nil {
			return nil, fmt.Errorf("%s: set spec.schedule: %w", obj.GetName(), err)
		}
	}
	obj.SetAPIVersion(desired)
	return obj.MarshalJSON()
}
