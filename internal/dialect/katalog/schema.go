package katalog

import (
	"fmt"
	"strconv"
	"strings"
)

// The openAPIV3Schema types a template result (a string) is converted to.
const (
	typeInteger = "integer"
	typeNumber  = "number"
	typeBoolean = "boolean"
)

// schemaType returns the openAPIV3Schema type of the field at p in a CRD's version,
// following properties and additionalProperties; "" when the schema does not say (or
// the field is int-or-string).
func schemaType(crd map[string]any, version string, p Path) string {
	node := versionSchema(crd, version)
	for _, k := range p {
		if node == nil {
			return ""
		}
		if props, ok := node["properties"].(map[string]any); ok {
			if next, ok := props[k].(map[string]any); ok {
				node = next
				continue
			}
		}
		node, _ = node["additionalProperties"].(map[string]any)
	}
	if node == nil || node["x-kubernetes-int-or-string"] == true {
		return ""
	}
	t, _ := node["type"].(string)
	return t
}

// versionSchema finds spec.versions[name=version].schema.openAPIV3Schema, or the
// CRD-wide spec.validation.openAPIV3Schema of older CRDs.
func versionSchema(crd map[string]any, version string) map[string]any {
	spec, _ := crd["spec"].(map[string]any)
	versions, _ := spec["versions"].([]any)
	for _, v := range versions {
		vm, _ := v.(map[string]any)
		if vm["name"] != version {
			continue
		}
		if s, ok := vm["schema"].(map[string]any); ok {
			if o, ok := s["openAPIV3Schema"].(map[string]any); ok {
				return o
			}
		}
	}
	if val, ok := spec["validation"].(map[string]any); ok {
		o, _ := val["openAPIV3Schema"].(map[string]any)
		return o
	}
	return nil
}

// convertToType turns a string result into the schema's integer, number or boolean;
// any other value, or an unknown type, is returned unchanged.
func convertToType(v any, typ string) (any, error) {
	s, ok := v.(string)
	if !ok || typ == "" {
		return v, nil
	}
	t := strings.TrimSpace(s)
	switch typ {
	case typeInteger:
		n, err := strconv.ParseInt(t, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%q is not an integer, and the CRD schema types the field as integer", s)
		}
		return n, nil
	case typeNumber:
		if n, err := strconv.ParseInt(t, 10, 64); err == nil {
			return n, nil
		}
		f, err := strconv.ParseFloat(t, 64)
		if err != nil {
			return nil, fmt.Errorf("%q is not a number, and the CRD schema types the field as number", s)
		}
		return f, nil
	case typeBoolean:
		b, err := strconv.ParseBool(t)
		if err != nil {
			return nil, fmt.Errorf("%q is not true or false, and the CRD schema types the field as boolean", s)
		}
		return b, nil
	}
	return v, nil
}
