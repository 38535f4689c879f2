package gatekeeper

import (
	"encoding/json"
	"testing"
)

// The generator is deterministic per seed and index (a failing case is reproduced by
// its name alone), and different indexes give different cases.
func TestGenerateDeterministic(t *testing.T) {
	for i := range 50 {
		a, _ := json.Marshal(Generate(3, i))
		b, _ := json.Marshal(Generate(3, i))
		if string(a) != string(b) {
			t.Fatalf("case 3/%d differs between two runs", i)
		}
		if c, _ := json.Marshal(Generate(3, i+1)); string(c) == string(a) {
			t.Fatalf("cases 3/%d and 3/%d are the same", i, i+1)
		}
	}
}

func TestLocationPrefixes(t *testing.T) {
	got := locationPrefixes(`spec.containers[name: *].volumeMounts[mountPath: "/a.b"].readOnly`)
	want := []string{"spec", "spec.containers", "spec.containers[name: *]", "spec.containers[name: *].volumeMounts", `spec.containers[name: *].volumeMounts[mountPath: "/a.b"]`, `spec.containers[name: *].volumeMounts[mountPath: "/a.b"].readOnly`}
	if len(got) != len(want) {
		t.Fatalf("got %q", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("got %q, want %q", got, want)
		}
	}
}
