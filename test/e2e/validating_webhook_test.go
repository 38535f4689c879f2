package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestValidatingWebhook checks RegisterValidatingWebhook: the API server
// calls the webhook and enforces its verdict.
func TestValidatingWebhook(t *testing.T) {
	const denyLabel = "e2e.morph.dev/deny"
	c := Current(t)
	ns := CreateNamespace(t, "e2e-validating-", nil)

	handler := denyLabelHandler(denyLabel) // the webhook under test
	url, caPEM := StartWebhookServer(t, handler)
	RegisterValidatingWebhook(t, "e2e-deny-label", url+"/validate", caPEM, []admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
		Rule: admissionregistrationv1.Rule{
			APIGroups:   []string{""},
			APIVersions: []string{"v1"},
			Resources:   []string{"configmaps"},
		},
	}})

	cms := c.Kube.CoreV1().ConfigMaps(ns.Name)
	allowed := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "allowed"}}
	if _, err := cms.Create(t.Context(), allowed, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create allowed ConfigMap: %v", err)
	}
	denied := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "denied", Labels: map[string]string{denyLabel: "true"}}}
	_, err := cms.Create(t.Context(), denied, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "carries "+denyLabel) {
		t.Fatalf("create denied ConfigMap: err = %v, want Forbidden by the webhook", err)
	}
	if _, err := cms.Get(t.Context(), denied.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("get denied ConfigMap: err = %v, want NotFound", err)
	}
}

// denyLabelHandler is a validating admission webhook (admission.k8s.io/v1)
// denying objects that carry label key.
func denyLabelHandler(key string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
		resp := &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
		if _, ok := obj.Labels[key]; ok {
			resp.Allowed = false
			resp.Result = &metav1.Status{Code: http.StatusForbidden, Message: fmt.Sprintf("%s carries %s", obj.Name, key)}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(admissionv1.AdmissionReview{
			TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
			Response: resp,
		})
	})
}
