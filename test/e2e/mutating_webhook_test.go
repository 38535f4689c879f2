package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestMutatingWebhook checks that the API server calls a mutating webhook
// served by StartWebhookServer and stores the mutated object.
func TestMutatingWebhook(t *testing.T) {
	const labelKey, labelValue = "e2e.morph.dev/mutated", "true"
	c := Current(t)
	ns := CreateNamespace(t, "e2e-mutating-", nil)

	var calls atomic.Int32
	handler := addLabelHandler(labelKey, labelValue, &calls) // the webhook under test
	url, caPEM := StartWebhookServer(t, handler)
	RegisterMutatingWebhook(t, "e2e-add-label", url+"/mutate", caPEM, []admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
		Rule: admissionregistrationv1.Rule{
			APIGroups:   []string{""},
			APIVersions: []string{"v1"},
			Resources:   []string{"configmaps"},
		},
	}})

	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "mutate-me", Namespace: ns.Name, Labels: map[string]string{"app": "e2e"}},
		Data:       map[string]string{"k": "v"},
	}
	created, err := c.Kube.CoreV1().ConfigMaps(ns.Name).Create(t.Context(), cm, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create ConfigMap: %v", err)
	}
	if got := created.Labels[labelKey]; got != labelValue {
		t.Errorf("create response labels = %v, want %s=%s", created.Labels, labelKey, labelValue)
	}
	stored, err := c.Kube.CoreV1().ConfigMaps(ns.Name).Get(t.Context(), cm.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get ConfigMap: %v", err)
	}
	if stored.Labels[labelKey] != labelValue || stored.Labels["app"] != "e2e" {
		t.Errorf("stored labels = %v, want app=e2e and %s=%s", stored.Labels, labelKey, labelValue)
	}
	if calls.Load() == 0 {
		t.Error("the webhook handler was never called")
	}
}

// addLabelHandler is a mutating admission webhook (admission.k8s.io/v1)
// answering a JSONPatch that sets label key=value, counting its calls.
func addLabelHandler(key, value string, calls *atomic.Int32) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		var review admissionv1.AdmissionReview
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&review); err != nil || review.Request == nil {
			http.Error(w, fmt.Sprintf("decode AdmissionReview: %v", err), http.StatusBadRequest)
			return
		}
		var obj metav1.PartialObjectMetadata
		if err := json.Unmarshal(review.Request.Object.Raw, &obj); err != nil {
			http.Error(w, fmt.Sprintf("decode object: %v", err), http.StatusBadRequest)
			return
		}
		var patch []map[string]any
		if obj.Labels == nil {
			patch = []map[string]any{{"op": "add", "path": "/metadata/labels", "value": map[string]string{key: value}}}
		} else {
			escaped := strings.NewReplacer("~", "~0", "/", "~1").Replace(key)
			patch = []map[string]any{{"op": "add", "path": "/metadata/labels/" + escaped, "value": value}}
		}
		patchJSON, err := json.Marshal(patch)
		if err != nil {
			http.Error(w, fmt.Sprintf("encode patch: %v", err), http.StatusInternalServerError)
			return
		}
		patchType := admissionv1.PatchTypeJSONPatch
		out := admissionv1.AdmissionReview{
			TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
			Response: &admissionv1.AdmissionResponse{
				UID:       review.Request.UID,
				Allowed:   true,
				PatchType: &patchType,
				Patch:     patchJSON,
			},
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
	})
}
