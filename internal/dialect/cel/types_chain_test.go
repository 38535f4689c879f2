package cel

import (
	"errors"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"
)

// apiTypesStub knows one kind, as the API server's OpenAPI would.
type apiTypesStub struct {
	gvk   schema.GroupVersionKind
	tc    managedfields.TypeConverter
	asked int
}

func (s *apiTypesStub) TypeConverter(gvk schema.GroupVersionKind) (managedfields.TypeConverter, error) {
	s.asked++
	if gvk == s.gvk {
		return s.tc, nil
	}
	return nil, errors.New("no schema for " + gvk.String() + ": the API server does not publish one (yet)")
}

// TestAPITypes checks that the API server's schemas answer only the kinds morph's
// offline schemas do not know, and that offline errors keep their advice.
func TestAPITypes(t *testing.T) {
	offline := newOfflineTypes(nil)
	pod, err := offline.TypeConverter(schema.GroupVersionKind{Version: "v1", Kind: "Pod"})
	if err != nil {
		t.Fatal(err)
	}
	token := schema.GroupVersionKind{Group: "authentication.k8s.io", Version: "v1", Kind: "Widget"}
	stub := &apiTypesStub{gvk: token, tc: pod}
	d := newDialect(Options{APITypes: stub})
	if _, err := d.types.TypeConverter(schema.GroupVersionKind{Version: "v1", Kind: "Pod"}); err != nil || stub.asked != 0 {
		t.Errorf("Pod: error %v, API asked %d times; want the offline schema", err, stub.asked)
	}
	if tc, err := d.types.TypeConverter(token); err != nil || tc != pod {
		t.Errorf("%s: %v, %v; want the API server's schema", token, tc, err)
	}
	_, err = d.types.TypeConverter(schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Gadget"})
	if err == nil || !strings.Contains(err.Error(), "CustomResourceDefinition") {
		t.Errorf("unknown kind: %v; want the offline advice", err)
	}
}
