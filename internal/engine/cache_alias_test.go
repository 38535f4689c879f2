package engine

import (
	"testing"
	"unsafe"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The candidate cache keeps its own copies of a request's strings: a key that pointed
// into a request body kept the whole body alive.
func TestCandidateCacheClonesKeys(t *testing.T) {
	s := mustSet(t, mut("a"))
	body := []byte(`{"group":"made.up","version":"v1","kind":"MadeUp"} and the rest of a large body`)
	at := func(from, to int) string { return unsafe.String(&body[from], to-from) }
	gvk := schema.GroupVersionKind{Group: at(10, 17), Version: at(30, 32), Kind: at(42, 48)}
	if gvk.Group != "made.up" || gvk.Version != "v1" || gvk.Kind != "MadeUp" {
		t.Fatalf("test setup: %v", gvk)
	}
	s.candidates(gvk, Create)
	start, end := uintptr(unsafe.Pointer(&body[0])), uintptr(unsafe.Pointer(&body[len(body)-1]))
	inBody := func(s string) bool {
		p := uintptr(unsafe.Pointer(unsafe.StringData(s)))
		return p >= start && p <= end
	}
	found := false
	s.cache.Range(func(k, _ any) bool {
		key := k.(indexKey)
		if key.gvk == gvk {
			found = true
			if inBody(key.gvk.Group) || inBody(key.gvk.Version) || inBody(key.gvk.Kind) {
				t.Errorf("the cached key %v points into the request's bytes", key.gvk)
			}
		}
		return true
	})
	if !found {
		t.Fatal("the key was not cached")
	}
}
