package webhook

import (
	"errors"
	"testing"

	"github.com/morph-dev/morph/internal/policy"
)

// TestLoadedFollowsEverySwap: Options.Loaded sees each snapshot the server switched to,
// after the switch (the server is ready), and nothing for a load that failed.
func TestLoadedFollowsEverySwap(t *testing.T) {
	src := bundleSource(&policy.Bundle{})
	var seen []*Snapshot
	var s *Server
	s, err := New(Options{Source: src, Admission: true, Conversion: true, Loaded: func(snap *Snapshot) {
		if !s.Ready() {
			t.Error("Loaded called before the server switched to the snapshot")
		}
		seen = append(seen, snap)
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	first := src.snap
	src.set(1, nil, errors.New("broken policy"))
	if err := s.Reload(); err == nil {
		t.Fatal("Reload of a failing source succeeded")
	}
	src.mu.Lock()
	src.snap = &Snapshot{Bundle: &policy.Bundle{}}
	second := src.snap
	src.mu.Unlock()
	src.set(2, nil, nil)
	s.poll()
	if len(seen) != 2 || seen[0] != first || seen[1] != second {
		t.Errorf("Loaded saw %d snapshots; want the two that loaded, in order", len(seen))
	}
}
