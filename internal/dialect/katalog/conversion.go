package katalog

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/morph-dev/morph/internal/engine"
)

// HandleConversionReview answers a v1 ConversionReview with the given converters. It
// knows nothing of Katalogs: any engine.Converter will do. The response echoes the
// request's uid and holds the objects converted in request order; when any object
// fails, it holds none and its result is a Failure whose message names the object,
// as the API server expects (all or nothing). It never panics on a malformed review.
func HandleConversionReview(ctx context.Context, converters []engine.Converter, review *apiextensionsv1.ConversionReview) *apiextensionsv1.ConversionReview {
	out := &apiextensionsv1.ConversionReview{TypeMeta: metav1.TypeMeta{APIVersion: "apiextensions.k8s.io/v1", Kind: "ConversionReview"}}
	if review == nil || review.Request == nil {
		out.Response = &apiextensionsv1.ConversionResponse{Result: failure("the ConversionReview has no request")}
		return out
	}
	req := review.Request
	resp := &apiextensionsv1.ConversionResponse{UID: req.UID}
	out.Response = resp
	converted, err := convertAll(ctx, converters, req)
	if err != nil {
		resp.Result = failure(err.Error())
		return out
	}
	resp.ConvertedObjects = converted
	resp.Result = metav1.Status{Status: metav1.StatusSuccess}
	return out
}

func failure(msg string) metav1.Status {
	return metav1.Status{Status: metav1.StatusFailure, Message: msg}
}

func convertAll(ctx context.Context, converters []engine.Converter, req *apiextensionsv1.ConversionRequest) ([]runtime.RawExtension, error) {
	if req.DesiredAPIVersion == "" {
		return nil, fmt.Errorf("the request has no desiredAPIVersion")
	}
	out := make([]runtime.RawExtension, 0, len(req.Objects))
	for i, raw := range req.Objects {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("conversion stopped before objects[%d]: %w", i, err)
		}
		obj, err := decodeObject(raw.Raw)
		if err != nil {
			return nil, fmt.Errorf("objects[%d]: %w", i, err)
		}
		apiVersion, _ := obj["apiVersion"].(string)
		kind, _ := obj["kind"].(string)
		gv, err := schema.ParseGroupVersion(apiVersion)
		if err != nil {
			return nil, fmt.Errorf("objects[%d] (%s): apiVersion: %w", i, objectName(obj), err)
		}
		conv := findConverter(converters, schema.GroupKind{Group: gv.Group, Kind: kind})
		if conv == nil {
			return nil, fmt.Errorf("objects[%d] (%s): no conversion is declared for %s", i, objectName(obj), schema.GroupKind{Group: gv.Group, Kind: kind})
		}
		res, err := conv.Convert(ctx, obj, req.DesiredAPIVersion)
		if err != nil {
			return nil, err
		}
		data, err := json.Marshal(res)
		if err != nil {
			return nil, fmt.Errorf("encoding %s: %w", objectName(obj), err)
		}
		out = append(out, runtime.RawExtension{Raw: data})
	}
	return out, nil
}

func findConverter(converters []engine.Converter, gk schema.GroupKind) engine.Converter {
	for _, c := range converters {
		if c.GroupKind() == gk {
			return c
		}
	}
	return nil
}

// decodeObject decodes a JSON object with morph's number normalisation.
func decodeObject(data []byte) (map[string]any, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, fmt.Errorf("the object is empty")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var obj map[string]any
	if err := dec.Decode(&obj); err != nil {
		return nil, fmt.Errorf("not a JSON object: %w", err)
	}
	if obj == nil {
		return nil, fmt.Errorf("the object is null")
	}
	engine.Normalize(obj)
	return obj, nil
}
