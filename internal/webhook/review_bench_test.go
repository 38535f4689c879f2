package webhook

import (
	"bytes"
	"encoding/json"
	"os"
	"reflect"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
)

// The typed review reader (decodeAdmissionReview: jsonvalue reads the body once, and
// reviewFromJSON the typed fields from that value) keeps its place only while it beats
// what it replaced in its regime: encoding/json decoding the AdmissionReview, then
// jsonvalue decoding request.object and request.oldObject again from their raw bytes.
// Both benchmarks below give the same result (TestReviewDecodersAgree) from the same
// bodies: the bench workload's Pod (bench/testdata/gatekeeper-workload, a copy of
// shared/bench/gatekeeper-workload) as a CREATE, as the load test sends it, and as an
// UPDATE carrying the Pod twice.

const workloadPod = "../../bench/testdata/gatekeeper-workload/pod.json"

// reviewWorkloads are the AdmissionReview bodies the benchmarks decode, by name.
func reviewWorkloads(tb testing.TB) map[string][]byte {
	tb.Helper()
	raw, err := os.ReadFile(workloadPod)
	if err != nil {
		tb.Fatal(err)
	}
	var pod bytes.Buffer
	if err := json.Compact(&pod, raw); err != nil {
		tb.Fatal(err)
	}
	request := func(op admissionv1.Operation, old []byte) []byte {
		review := admissionv1.AdmissionReview{
			TypeMeta: metav1.TypeMeta{APIVersion: admissionGV, Kind: "AdmissionReview"},
			Request: &admissionv1.AdmissionRequest{
				UID:       "705ab4f5-6393-11e8-b7cc-42010a800002",
				Kind:      metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
				Resource:  metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
				Operation: op,
				Namespace: "apps",
				Name:      "checkout-7d9f8b6c4-x2lqp",
				UserInfo: authenticationv1.UserInfo{
					Username: "system:serviceaccount:kube-system:replicaset-controller",
					UID:      "b1c7b0d2-0d1a-4c39-9f4e-1f0c8c9f2e11",
					Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"},
				},
				Object:    k8sruntime.RawExtension{Raw: pod.Bytes()},
				OldObject: k8sruntime.RawExtension{Raw: old},
			},
		}
		body, err := json.Marshal(review)
		if err != nil {
			tb.Fatal(err)
		}
		return body
	}
	return map[string][]byte{
		"create": request(admissionv1.Create, nil),
		"update": request(admissionv1.Update, pod.Bytes()),
	}
}

// decodeWithEncodingJSON is the decoding the typed reader replaced: encoding/json for
// the review, then the embedded objects from their raw bytes with the engine's number
// rules.
func decodeWithEncodingJSON(body []byte) (*admissionReview, error) {
	review := &admissionv1.AdmissionReview{}
	if err := json.Unmarshal(body, review); err != nil {
		return nil, err
	}
	out := &admissionReview{AdmissionReview: review}
	var err error
	if out.object, err = decodeObject("request.object", review.Request.Object.Raw); err != nil {
		return nil, err
	}
	if out.oldObject, err = decodeObject("request.oldObject", review.Request.OldObject.Raw); err != nil {
		return nil, err
	}
	review.Request.Object, review.Request.OldObject = k8sruntime.RawExtension{}, k8sruntime.RawExtension{}
	return out, nil
}

// TestReviewDecodersAgree: the two benchmarks measure the same work.
func TestReviewDecodersAgree(t *testing.T) {
	for name, body := range reviewWorkloads(t) {
		typed, err := decodeAdmissionReview(body)
		if err != nil {
			t.Fatal(name, err)
		}
		reflective, err := decodeWithEncodingJSON(body)
		if err != nil {
			t.Fatal(name, err)
		}
		if !reflect.DeepEqual(typed.AdmissionReview, reflective.AdmissionReview) || !reflect.DeepEqual(typed.object, reflective.object) || !reflect.DeepEqual(typed.oldObject, reflective.oldObject) {
			t.Errorf("%s: the decoders disagree:\n%+v\n%+v", name, typed.Request, reflective.Request)
		}
		if typed.object == nil || (name == "update") != (typed.oldObject != nil) {
			t.Errorf("%s: objects not decoded", name)
		}
	}
}

// BenchmarkReviewJSONValue decodes the workload's reviews as /mutate does.
func BenchmarkReviewJSONValue(b *testing.B) {
	benchmarkReview(b, decodeAdmissionReview)
}

// BenchmarkReviewEncodingJSON decodes the same reviews with encoding/json, the baseline
// of BenchmarkReviewJSONValue.
func BenchmarkReviewEncodingJSON(b *testing.B) {
	benchmarkReview(b, decodeWithEncodingJSON)
}

func benchmarkReview(b *testing.B, decode func([]byte) (*admissionReview, error)) {
	workloads := reviewWorkloads(b)
	for _, name := range []string{"create", "update"} {
		body := workloads[name]
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := decode(body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
