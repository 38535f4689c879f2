package webhook

import (
	"encoding/json"
	"net/http"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/morph-dev/morph/internal/policy"
)

// FuzzAdmissionReview checks that any body is answered 200 with an AdmissionReview for
// its uid, or 400 with a message; never a 5xx.
func FuzzAdmissionReview(f *testing.F) {
	f.Add(admissionBody(f, "seed", pod(nil)))
	f.Add(admissionBody(f, "seed", pod(map[string]any{"debug": "1"}), asOperation(admissionv1.Update)))
	f.Add(admissionBody(f, "seed", nil, asOperation(admissionv1.Delete)))
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"version":"v1","kind":"Namespace"},"operation":"CREATE","object":{"metadata":{"labels":{"a":"b"}}}}}`))
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"version":"v1","kind":"Pod"},"operation":"CREATE","object":{"n":1e400}}}`))
	f.Add([]byte(`{`))
	s := newTestServer(f, &policy.Bundle{
		Mutators:   mutators(&labelMutator{name: "team", key: "team", value: "a"}),
		Validators: validators(&labelValidator{name: "no-debug", key: "debug", deny: true}, &labelValidator{name: "warn-team", key: "team"}),
	})
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, path := range []string{"/mutate", "/validate"} {
			w := post(t, s.Handler(), path, body)
			switch w.Code {
			case http.StatusOK:
				var review admissionv1.AdmissionReview
				if err := json.Unmarshal(w.Body.Bytes(), &review); err != nil || review.Response == nil || review.Response.UID == "" {
					t.Fatalf("%s: 200 without an answer: %s", path, w.Body)
				}
			case http.StatusBadRequest:
				if w.Body.Len() == 0 {
					t.Fatalf("%s: 400 without a message", path)
				}
			default:
				t.Fatalf("%s: status %d: %s", path, w.Code, w.Body)
			}
		}
	})
}

// FuzzConversionReview checks /convert the same way.
func FuzzConversionReview(f *testing.F) {
	f.Add(conversionBody(f, "seed", "demo.morph.dev/v2", widget("v1", "a", map[string]any{"size": 1})))
	f.Add(conversionBody(f, "seed", "demo.morph.dev/v1", widget("v2", "a", map[string]any{"replicas": 1}), widget("v1", "b", nil)))
	f.Add([]byte(`{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","request":{"uid":"u","desiredAPIVersion":"a/b/c","objects":[1]}}`))
	s := newTestServer(f, &policy.Bundle{Converters: converters(&versionConverter{})})
	f.Fuzz(func(t *testing.T, body []byte) {
		w := post(t, s.Handler(), "/convert", body)
		switch w.Code {
		case http.StatusOK:
			var review apiextensionsv1.ConversionReview
			if err := json.Unmarshal(w.Body.Bytes(), &review); err != nil || review.Response == nil || review.Response.UID == "" {
				t.Fatalf("200 without an answer: %s", w.Body)
			}
			if review.Response.Result.Status != "Success" && review.Response.ConvertedObjects != nil {
				t.Fatalf("a failed review carries objects: %s", w.Body)
			}
		case http.StatusBadRequest:
		default:
			t.Fatalf("status %d: %s", w.Code, w.Body)
		}
	})
}
