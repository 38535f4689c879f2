package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var conversionGV = apiextensionsv1.SchemeGroupVersion.String()

func decodeConversionReview(body []byte) (*apiextensionsv1.ConversionReview, error) {
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, errors.New("empty body: send a ConversionReview apiextensions.k8s.io/v1")
	}
	var review apiextensionsv1.ConversionReview
	if err := json.Unmarshal(body, &review); err != nil {
		return nil, fmt.Errorf("not a ConversionReview: %w", err)
	}
	if review.APIVersion != conversionGV || review.Kind != "ConversionReview" {
		return nil, fmt.Errorf("expected apiVersion %s kind ConversionReview, got apiVersion %q kind %q: list only v1 in conversionReviewVersions", conversionGV, review.APIVersion, review.Kind)
	}
	r := review.Request
	switch {
	case r == nil:
		return nil, errors.New("ConversionReview has no request")
	case r.UID == "":
		return nil, errors.New("request.uid is empty")
	case r.DesiredAPIVersion == "":
		return nil, errors.New("request.desiredAPIVersion is empty")
	}
	if gv, err := schema.ParseGroupVersion(r.DesiredAPIVersion); err != nil || gv.Version == "" {
		return nil, fmt.Errorf("request.desiredAPIVersion %q is not group/version", r.DesiredAPIVersion)
	}
	return &review, nil
}

// convert answers /convert.
func (s *Server) convert(ctx context.Context, body []byte, c *call) reply {
	review, err := decodeConversionReview(body)
	if err != nil {
		return badRequest("%v", err)
	}
	cr := review.Request
	c.uid, c.kind = string(cr.UID), cr.DesiredAPIVersion
	rt := s.rt.Load()
	if rt == nil {
		return unavailable("convert", s)
	}
	resp := &apiextensionsv1.ConversionResponse{UID: cr.UID}
	answer := &apiextensionsv1.ConversionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: conversionGV, Kind: "ConversionReview"},
		Response: resp,
	}
	converted := make([]k8sruntime.RawExtension, 0, len(cr.Objects))
	for i, raw := range cr.Objects {
		out, err := rt.convertOne(ctx, i, raw.Raw, cr.DesiredAPIVersion)
		if err != nil {
			c.err = err
			s.metrics.conversions.WithLabelValues("failure").Inc()
			resp.Result = metav1.Status{Status: metav1.StatusFailure, Message: err.Error()}
			return ok(answer, outcomeFailed)
		}
		converted = append(converted, k8sruntime.RawExtension{Raw: out})
	}
	s.metrics.conversions.WithLabelValues("success").Add(float64(len(converted)))
	resp.ConvertedObjects = converted
	resp.Result = metav1.Status{Status: metav1.StatusSuccess}
	return ok(answer, outcomeAllowed)
}

// convertOne converts the i-th object; its errors name the object.
func (rt *runtime) convertOne(ctx context.Context, i int, raw []byte, desired string) ([]byte, error) {
	obj, err := decodeObject(fmt.Sprintf("objects[%d]", i), raw)
	if err != nil {
		return nil, err
	}
	if obj == nil {
		return nil, fmt.Errorf("objects[%d] is empty", i)
	}
	kind, _ := obj["kind"].(string)
	where := objectName(i, obj, kind)
	out, changed, err := rt.conversions.Convert(ctx, obj, desired)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	if !changed {
		return raw, nil
	}
	data, err := json.Marshal(out)
	if err != nil {
		return nil, fmt.Errorf("%s: encoding the converted object: %w", where, err)
	}
	return data, nil
}

// objectName names an object of a conversion request for messages:
// `objects[2] (CronJob demo/nightly)`.
func objectName(i int, obj map[string]any, kind string) string {
	ns, _, _ := unstructured.NestedString(obj, "metadata", "namespace")
	name, _, _ := unstructured.NestedString(obj, "metadata", "name")
	if ns != "" {
		name = ns + "/" + name
	}
	if kind == "" && name == "" {
		return fmt.Sprintf("objects[%d]", i)
	}
	return fmt.Sprintf("objects[%d] (%s %s)", i, kind, name)
}
