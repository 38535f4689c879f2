package webhook

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"

	"github.com/morph-dev/morph/internal/jsonvalue"
)

// typedFields is what encoding/json makes of a review body, without the objects that
// decodeAdmissionReview takes apart.
func typedFields(t testing.TB, body []byte) (*admissionv1.AdmissionReview, error) {
	t.Helper()
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &review); err != nil {
		return nil, err
	}
	review.Response = nil
	if r := review.Request; r != nil {
		r.Object, r.OldObject = k8sruntime.RawExtension{}, k8sruntime.RawExtension{}
		if len(r.Options.Raw) > 0 {
			// Compare options as values: RawExtension keeps the bytes as sent.
			v, err := jsonvalue.Decode(r.Options.Raw)
			if err != nil {
				return nil, err
			}
			if r.Options.Raw, err = jsonvalue.Append(nil, v); err != nil {
				return nil, err
			}
		}
	}
	return &review, nil
}

func TestReviewFromJSONMatchesEncodingJSON(t *testing.T) {
	dryRun := true
	full := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID:                "705ab4f5-6393-11e8-b7cc-42010a800002",
			Kind:               metav1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"},
			Resource:           metav1.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"},
			SubResource:        "scale",
			RequestKind:        &metav1.GroupVersionKind{Group: "apps", Version: "v1beta1", Kind: "Deployment"},
			RequestResource:    &metav1.GroupVersionResource{Group: "apps", Version: "v1beta1", Resource: "deployments"},
			RequestSubResource: "scale",
			Name:               "web",
			Namespace:          "apps",
			Operation:          admissionv1.Update,
			UserInfo: authenticationv1.UserInfo{
				Username: "admin", UID: "014fbff9a07c", Groups: []string{"system:authenticated", "my-admin-group"},
				Extra: map[string]authenticationv1.ExtraValue{"some-key": {"some-value1", "some-value2"}},
			},
			Object:    k8sruntime.RawExtension{Raw: []byte(`{"apiVersion":"autoscaling/v1","kind":"Scale"}`)},
			OldObject: k8sruntime.RawExtension{Raw: []byte(`{"apiVersion":"autoscaling/v1","kind":"Scale"}`)},
			DryRun:    &dryRun,
			Options:   k8sruntime.RawExtension{Raw: []byte(`{"apiVersion":"meta.k8s.io/v1","kind":"UpdateOptions","fieldManager":"kubectl"}`)},
		},
	}
	fullBody, err := json.Marshal(full)
	if err != nil {
		t.Fatal(err)
	}
	bodies := map[string][]byte{
		"every field":           fullBody,
		"the workload":          admissionBody(t, "w", pod(map[string]any{"app": "web"})),
		"nulls":                 []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"group":null,"version":"v1","kind":"Pod"},"resource":null,"name":null,"dryRun":null,"userInfo":{"groups":null,"extra":null},"options":null,"object":null}}`),
		"options not an object": []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"version":"v1","kind":"Pod"},"options":[1,"a"]}}`),
		"unknown fields":        []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","extra":1,"request":{"uid":"u","kind":{"version":"v1","kind":"Pod","x":[]},"y":{"z":1}}}`),
	}
	for name, body := range bodies {
		t.Run(name, func(t *testing.T) {
			want, err := typedFields(t, body)
			if err != nil {
				t.Fatal(err)
			}
			got, err := decodeAdmissionReview(body)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got.AdmissionReview, want) {
				t.Errorf("typed review:\n got %+v\nwant %+v", got.Request, want.Request)
			}
		})
	}
}

func TestReviewFromJSONTypeErrors(t *testing.T) {
	const head = `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"version":"v1","kind":"Pod"},`
	tests := []struct{ body, want string }{
		{`[]`, "not an AdmissionReview: expected a JSON object, got an array"},
		{`{"apiVersion":1}`, "not an AdmissionReview: apiVersion: expected a string, got a number"},
		{`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":"x"}`, "request: expected an object, got a string"},
		{head + `"name":true}}`, "request.name: expected a string, got a boolean"},
		{head + `"operation":7}}`, "request.operation: expected a string, got a number"},
		{head + `"resource":{"resource":[]}}}`, "request.resource.resource: expected a string, got an array"},
		{head + `"requestKind":"Pod"}}`, "request.requestKind: expected an object, got a string"},
		{head + `"dryRun":"yes"}}`, "request.dryRun: expected a boolean, got a string"},
		{head + `"userInfo":{"groups":"a"}}}`, "request.userInfo.groups: expected a list of strings, got a string"},
		{head + `"userInfo":{"groups":["a",1]}}}`, "request.userInfo.groups[1]: expected a string, got a number"},
		{head + `"userInfo":{"extra":{"k":[{}]}}}}`, "request.userInfo.extra.k[0]: expected a string, got an object"},
		{head + `"object":"pod"}}`, "request.object: expected a JSON object, got a string"},
		{head + `"oldObject":[{}]}}`, "request.oldObject: expected a JSON object, got an array"},
	}
	for _, tt := range tests {
		_, err := decodeAdmissionReview([]byte(tt.body))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s:\n got error %v\nwant one with %q", tt.body, err, tt.want)
		}
		// The embedded objects are the one place morph is stricter: encoding/json keeps
		// any JSON value in a RawExtension, morph needs an object to mutate.
		embedded := strings.HasPrefix(tt.want, "request.object") || strings.HasPrefix(tt.want, "request.oldObject")
		if _, jerr := typedFields(t, []byte(tt.body)); jerr == nil && !embedded {
			t.Errorf("%s: encoding/json accepts what morph refuses", tt.body)
		}
	}
}

// canonicalKeys are the JSON names of the typed review's fields. encoding/json matches
// them without regard to case; morph, like the API server's decoder, does not.
var canonicalKeys = strings.Fields("apiVersion kind request response uid group version resource subResource requestKind requestResource requestSubResource name namespace operation userInfo username groups extra object oldObject dryRun options")

func hasCaseVariant(v any) bool {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			for _, c := range canonicalKeys {
				if k != c && strings.EqualFold(k, c) {
					return true
				}
			}
			if hasCaseVariant(e) {
				return true
			}
		}
	case []any:
		for _, e := range x {
			if hasCaseVariant(e) {
				return true
			}
		}
	}
	return false
}

// hasDuplicateKey reports whether an object in body repeats a key: encoding/json then
// merges the values into one struct, while the generic model keeps the last.
func hasDuplicateKey(body []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(body))
	type frame struct {
		keys     map[string]bool
		isObject bool
		wantKey  bool
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		switch x := tok.(type) {
		case json.Delim:
			switch x {
			case '{', '[':
				if top != nil && top.isObject {
					top.wantKey = true
				}
				stack = append(stack, &frame{keys: map[string]bool{}, isObject: x == '{', wantKey: x == '{'})
			default:
				stack = stack[:len(stack)-1]
			}
			continue
		case string:
			if top != nil && top.isObject && top.wantKey {
				if top.keys[x] {
					return true
				}
				top.keys[x] = true
				top.wantKey = false
				continue
			}
		}
		if top != nil && top.isObject {
			top.wantKey = true
		}
	}
}

// FuzzReviewFromJSON checks that morph never refuses a review encoding/json accepts, and
// that when both accept, the typed fields are the same (keys spelled in another case,
// which only encoding/json matches, and repeated keys, which it merges, are left out).
func FuzzReviewFromJSON(f *testing.F) {
	f.Add(admissionBody(f, "seed", pod(nil)))
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"version":"v1","kind":"Pod"},"userInfo":{"username":"a","groups":["x"],"extra":{"k":["v"]}},"dryRun":true,"options":{"a":1}}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		v, err := jsonvalue.Decode(body)
		if err != nil || hasCaseVariant(v) || hasDuplicateKey(body) {
			return
		}
		want, jerr := typedFields(t, body)
		got, merr := decodeAdmissionReview(body)
		if jerr != nil {
			return
		}
		if merr != nil {
			if want.Request != nil && want.Request.UID != "" && want.Request.Kind.Kind != "" && want.Request.Kind.Version != "" && want.APIVersion == admissionGV && want.Kind == "AdmissionReview" && !bytes.Contains(body, []byte("bject")) {
				t.Fatalf("%s: morph refuses (%v) what encoding/json accepts", body, merr)
			}
			return
		}
		if !reflect.DeepEqual(got.AdmissionReview, want) {
			t.Fatalf("%s:\n got %+v\nwant %+v", body, got.Request, want.Request)
		}
	})
}

func TestHasDuplicateKey(t *testing.T) {
	for body, want := range map[string]bool{
		`{"a":1,"b":{"a":2}}`:           false,
		`{"a":1,"a":2}`:                 true,
		`{"r":{"x":[{"k":1},{"k":2}]}}`: false,
		`{"r":{"x":{"k":1,"k":2}}}`:     true,
		`{"r":{"a":"b"},"r":{}}`:        true,
		`[{"a":1},{"a":1}]`:             false,
	} {
		if got := hasDuplicateKey([]byte(body)); got != want {
			t.Errorf("hasDuplicateKey(%s) = %v, want %v", body, got, want)
		}
	}
}
