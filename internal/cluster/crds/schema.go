package crds

import (
	"reflect"
	"strings"

	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// The schema builders below keep the CRD definitions short and readable. Every schema
// they build is structural: each node has a type, except the free-form values, which
// carry x-kubernetes-preserve-unknown-fields and nothing else.

type props = map[string]apiextv1.JSONSchemaProps

func object(p props) apiextv1.JSONSchemaProps {
	return apiextv1.JSONSchemaProps{Type: "object", Properties: p}
}

func str(description string) apiextv1.JSONSchemaProps {
	return apiextv1.JSONSchemaProps{Type: "string", Description: description}
}

func enum(description string, values ...string) apiextv1.JSONSchemaProps {
	s := str(description)
	for _, v := range values {
		s.Enum = append(s.Enum, apiextv1.JSON{Raw: []byte(`"` + v + `"`)})
	}
	return s
}

func boolean(description string) apiextv1.JSONSchemaProps {
	return apiextv1.JSONSchemaProps{Type: "boolean", Description: description}
}

func integer(format, description string) apiextv1.JSONSchemaProps {
	return apiextv1.JSONSchemaProps{Type: "integer", Format: format, Description: description}
}

func array(items apiextv1.JSONSchemaProps) apiextv1.JSONSchemaProps {
	return apiextv1.JSONSchemaProps{Type: "array", Items: &apiextv1.JSONSchemaPropsOrArray{Schema: &items}}
}

func stringList(description string) apiextv1.JSONSchemaProps {
	return described(array(str("")), description)
}

// anyValue is a free-form JSON value of any type (a Gatekeeper assign.value, a Katalog
// default): the only places the schemas keep unknown content.
func anyValue(description string) apiextv1.JSONSchemaProps {
	return apiextv1.JSONSchemaProps{XPreserveUnknownFields: ptr(true), Description: description}
}

func described(s apiextv1.JSONSchemaProps, description string) apiextv1.JSONSchemaProps {
	s.Description = description
	return s
}

func ptr[T any](v T) *T { return &v }

// fromGo derives the schema of a Kubernetes API Go type from its json tags: the
// admissionregistration types that Kyverno's MutatingPolicy embeds (MatchResources,
// MatchCondition, Variable, Mutation) and metav1.LabelSelector. It knows the kinds those
// types use (strings, integers, booleans, slices, string maps, pointers, structs with
// inline members) and panics on any other, which the package's tests exercise.
func fromGo(t reflect.Type) apiextv1.JSONSchemaProps {
	switch t.Kind() {
	case reflect.Pointer:
		return fromGo(t.Elem())
	case reflect.String:
		return apiextv1.JSONSchemaProps{Type: "string"}
	case reflect.Bool:
		return apiextv1.JSONSchemaProps{Type: "boolean"}
	case reflect.Int32, reflect.Uint32:
		return apiextv1.JSONSchemaProps{Type: "integer", Format: "int32"}
	case reflect.Int, reflect.Int64, reflect.Uint64:
		return apiextv1.JSONSchemaProps{Type: "integer", Format: "int64"}
	case reflect.Slice:
		return array(fromGo(t.Elem()))
	case reflect.Map:
		if t.Key().Kind() != reflect.String {
			panic("crds: map key of " + t.String() + " is not a string")
		}
		v := fromGo(t.Elem())
		return apiextv1.JSONSchemaProps{Type: "object", AdditionalProperties: &apiextv1.JSONSchemaPropsOrBool{Allows: true, Schema: &v}}
	case reflect.Struct:
		out := object(props{})
		addFields(out.Properties, t)
		return out
	}
	panic("crds: no schema for Go type " + t.String())
}

func addFields(p props, t reflect.Type) {
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("json")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" {
			continue
		}
		if name == "" && (opts == "inline" || f.Anonymous) {
			addFields(p, f.Type)
			continue
		}
		if name == "" {
			name = f.Name
		}
		p[name] = fromGo(f.Type)
	}
}

// goSchema is fromGo for the type of v.
func goSchema[T any]() apiextv1.JSONSchemaProps {
	return fromGo(reflect.TypeFor[T]())
}
