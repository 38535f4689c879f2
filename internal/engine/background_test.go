package engine

import (
	"encoding/json"
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestRequestJSONRoundTrip(t *testing.T) {
	pod := map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": "p", "namespace": "ns"},
		"spec":     map[string]any{"replicas": int64(3), "ratio": 0.5, "list": []any{int64(1), "a", nil, true}},
	}
	cases := map[string]*Request{
		"zero": {},
		"admission": {
			UID: "u1", Kind: schema.GroupVersionKind{Version: "v1", Kind: "Pod"},
			Resource: schema.GroupVersionResource{Version: "v1", Resource: "pods"}, SubResource: "status",
			Operation: Update, Namespace: "ns", Name: "p", Object: pod, OldObject: pod,
			NamespaceObject: map[string]any{"metadata": map[string]any{"name": "ns"}},
			UserInfo:        UserInfo{Username: "alice", Groups: []string{"g"}, Extra: map[string][]string{"k": {"v"}}},
			Source:          SourceOriginal, DryRun: true, WriteBudget: 12,
		},
		"delete": {Operation: Delete, OldObject: pod},
		"background": {
			Background: true, Policy: &ID{Order: -2, Dialect: "cel", Kind: "MutatingPolicy", Namespace: "n", Name: "p", Part: "x"},
			Object:  pod,
			Trigger: &Request{Operation: Create, Object: pod, Kind: schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}},
		},
	}
	for name, req := range cases {
		t.Run(name, func(t *testing.T) {
			b, err := json.Marshal(req)
			if err != nil {
				t.Fatal(err)
			}
			var got Request
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(&got, req) {
				t.Errorf("round trip changed the request:\n got %#v\nwant %#v\njson %s", got, *req, b)
			}
		})
	}
}

func TestIDJSONRoundTrip(t *testing.T) {
	id := ID{Order: 3, Dialect: "cel", Kind: "MutatingPolicy", Name: "a", Part: "b"}
	b, err := json.Marshal(id)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != `{"order":3,"dialect":"cel","kind":"MutatingPolicy","name":"a","part":"b"}` {
		t.Errorf("json %s", b)
	}
	var got ID
	if err := json.Unmarshal(b, &got); err != nil || got != id {
		t.Errorf("got %#v, %v", got, err)
	}
}

// FuzzRequestJSON decodes arbitrary JSON as a Request: it must not panic, and what it
// decodes must encode and decode back to itself.
func FuzzRequestJSON(f *testing.F) {
	f.Add([]byte(`{"kind":{"Group":"","Version":"v1","Kind":"Pod"},"operation":"CREATE","object":{"a":1,"b":[1.5,null,"x"]}}`))
	f.Add([]byte(`{"background":true,"policy":{"dialect":"cel","kind":"MutatingPolicy","name":"p"},"trigger":{"operation":"DELETE","oldObject":{}}}`))
	f.Add([]byte(`{"object":null,"oldObject":[]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var r Request
		if err := json.Unmarshal(data, &r); err != nil {
			return
		}
		b, err := json.Marshal(&r)
		if err != nil {
			return // a float encoding/json cannot write (none decodes from JSON)
		}
		var again Request
		if err := json.Unmarshal(b, &again); err != nil {
			t.Fatalf("re-decoding %s: %v", b, err)
		}
		if !reflect.DeepEqual(&again, &r) {
			t.Fatalf("round trip changed the request:\n%#v\n%#v", r, again)
		}
	})
}
