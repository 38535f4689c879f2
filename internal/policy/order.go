package policy

import (
	"fmt"
	"strconv"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// OrderAnnotation on a policy's metadata sets its place in the engine's order, for
// every dialect: a whole number as a string ("10"), default 0.
const OrderAnnotation = "morph.dev/order"

// Order reads the document's morph.dev/order annotation: 0 when absent, an error
// located at the annotation when it is not a whole number written as a string. Every
// dialect reads it here, so that " 5" or 5 mean the same everywhere (an error: the API
// server keeps annotations as strings, and " 5" is not a number).
func (d Document) Order() (int, error) {
	v, ok, _ := unstructured.NestedFieldNoCopy(d.Object, "metadata", "annotations", OrderAnnotation)
	if !ok {
		return 0, nil
	}
	at := field.NewPath("metadata", "annotations").Key(OrderAnnotation)
	s, isString := v.(string)
	if !isString {
		return 0, d.Err(field.Invalid(at, Shown(v), fmt.Sprintf("annotations are strings, found %s; write a whole number in quotes, such as \"10\"", Describe(v))))
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, d.Err(field.Invalid(at, s, `not a whole number; give one such as "10"`))
	}
	return n, nil
}
