package katalog

import (
	"testing"

	"github.com/morph-dev/morph/internal/objects"
)

// TestNeeds: an entry's mutation reads its custom resource's CRD (the types of its
// defaults), which a cluster surface must watch for it (engine.Descriptor.Needs).
func TestNeeds(t *testing.T) {
	b := mustCompile(t, entryHeader+`      operatorBox:
        mutation:
        - {field: spec.replicas, default: "2"}
`)
	if len(b.Mutators) != 1 {
		t.Fatalf("%d mutators", len(b.Mutators))
	}
	if n := b.Mutators[0].Needs; len(n) != 1 || n[0] != objects.CRDResource {
		t.Errorf("Needs %v, want the CRDs", n)
	}
}
