package request

import (
	"encoding/json"
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/morph-dev/morph/internal/engine"
)

func TestWorkJSONRoundTrip(t *testing.T) {
	w := Work{
		Policy: engine.ID{Dialect: "cel", Kind: "MutatingPolicy", Name: "p"},
		Target: Target{
			Resource:    schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"},
			Kind:        schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Widget"},
			SubResource: "status", Namespace: "ns", Name: "w",
		},
		Trigger: &engine.Request{Operation: engine.Create, Name: "cm", Object: map[string]any{"data": map[string]any{"n": int64(1)}}},
	}
	b, err := json.Marshal(w)
	if err != nil {
		t.Fatal(err)
	}
	var got Work
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, w) {
		t.Errorf("round trip changed the work:\n got %#v\nwant %#v\njson %s", got, w, b)
	}
}
