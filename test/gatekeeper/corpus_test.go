package gatekeeper

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/morph-dev/morph/internal/engine"
)

// corpusEntry is one file of testdata/corpus: a disagreement the differential test found
// (before it was fixed, or as a documented divergence), the Gatekeeper code that decides
// it, and the answer both engines must give.
type corpusEntry struct {
	// About says what the case shows.
	About string `json:"about"`
	// Gatekeeper cites the file and function of Gatekeeper v3.23.1 that decide the case.
	Gatekeeper string `json:"gatekeeper"`
	// Divergence names the documented divergence when morph deliberately differs.
	Divergence string `json:"divergence,omitempty"`
	Case       struct {
		Mutators         string         `json:"mutators"`
		Object           map[string]any `json:"object"`
		RequestNamespace string         `json:"requestNamespace,omitempty"`
		Namespace        map[string]any `json:"namespace,omitempty"`
		Operation        string         `json:"operation,omitempty"`
		Source           string         `json:"source,omitempty"`
	} `json:"case"`
	// Want is Gatekeeper's answer (and morph's, unless Divergence is set).
	Want expectation `json:"want"`
	// Morph is morph's answer when Divergence is set.
	Morph *expectation `json:"morph,omitempty"`
}

type expectation struct {
	// Object is the final object.
	Object map[string]any `json:"object,omitempty"`
	// Accepted lists Kind/name of the mutators in force.
	Accepted []string `json:"accepted"`
	// Failed lists the mutators whose failure was isolated.
	Failed       []string `json:"failed,omitempty"`
	NotConverged bool     `json:"notConverged,omitempty"`
	// Refusal is part of the load error for a refused mutator (morph's words).
	Refusal string `json:"refusal,omitempty"`
}

func loadCorpus(t *testing.T) map[string]corpusEntry {
	t.Helper()
	files, err := filepath.Glob("testdata/corpus/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no corpus: %v", err)
	}
	out := map[string]corpusEntry{}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var e corpusEntry
		if err := yaml.UnmarshalStrict(raw, &e); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if e.About == "" || e.Gatekeeper == "" {
			t.Fatalf("%s: about and gatekeeper (the deciding code) are required", f)
		}
		if (e.Divergence == "") != (e.Morph == nil) {
			t.Fatalf("%s: a divergence needs morph's answer, and only a divergence", f)
		}
		out[strings.TrimSuffix(filepath.Base(f), ".yaml")] = e
	}
	return out
}

func (e corpusEntry) asCase(name string) Case {
	c := Case{Name: name, Mutators: e.Case.Mutators, Object: engine.Normalize(e.Case.Object).(map[string]any),
		RequestNamespace: e.Case.RequestNamespace, Operation: e.Case.Operation, Source: e.Case.Source}
	if e.Case.Namespace != nil {
		c.Namespace = engine.Normalize(e.Case.Namespace).(map[string]any)
	}
	if c.Operation == "" {
		c.Operation = "CREATE"
	}
	if c.Source == "" {
		c.Source = "Original"
	}
	return c
}

// TestCorpus pins morph's answer on every corpus case. It needs no oracle.
func TestCorpus(t *testing.T) {
	for name, e := range loadCorpus(t) {
		t.Run(name, func(t *testing.T) {
			want := e.Want
			if e.Morph != nil {
				want = *e.Morph
			}
			got := runMorph(e.asCase(name))
			loadErrors := strings.Join(got.LoadErrors, "\n")
			if why := want.check(got.Accepted, got.Failed, got.Object, got.NotConverged, &loadErrors); why != "" {
				t.Fatalf("%s\n(decided by Gatekeeper's %s)\nmorph: %s\n%s", e.About, e.Gatekeeper, why, describeCase(e.asCase(name), got, oracleResult{}))
			}
		})
	}
}

// TestCorpusOracle checks that Gatekeeper itself still gives each corpus case's answer,
// and that each divergence is recognised by its class.
func TestCorpusOracle(t *testing.T) {
	o := startOracle(t)
	for name, e := range loadCorpus(t) {
		t.Run(name, func(t *testing.T) {
			c := e.asCase(name)
			r, err := o.run(c)
			if err != nil {
				t.Fatal(err)
			}
			if why := e.Want.check(r.Accepted, r.Failed, r.Object, r.NotConverged, nil); why != "" {
				t.Fatalf("%s\n(decided by Gatekeeper's %s)\ngatekeeper: %s\n%s", e.About, e.Gatekeeper, why, describeCase(c, runMorph(c), r))
			}
			if e.Divergence != "" {
				if got := classify(c, runMorph(c), r); got != e.Divergence {
					t.Fatalf("classified as %q, want the divergence %q", got, e.Divergence)
				}
			}
		})
	}
}

// check compares an answer with the expectation; loadErrors is nil for Gatekeeper's
// answer, whose refusals are in its own words.
func (w expectation) check(accepted, failed []string, obj map[string]any, notConverged bool, loadErrors *string) string {
	switch {
	case strings.Join(accepted, ",") != strings.Join(w.Accepted, ","):
		return "accepted " + strings.Join(accepted, ",") + ", want " + strings.Join(w.Accepted, ",")
	case strings.Join(failed, ",") != strings.Join(w.Failed, ","):
		return "failed " + strings.Join(failed, ",") + ", want " + strings.Join(w.Failed, ",")
	case notConverged != w.NotConverged:
		return "wrong convergence"
	case w.Refusal != "" && loadErrors != nil && !strings.Contains(*loadErrors, w.Refusal):
		return "load errors do not say " + w.Refusal + ": " + *loadErrors
	case w.Object != nil && !jsonEqual(obj, w.Object):
		out, _ := yaml.Marshal(obj)
		return "object differs:\n" + string(out)
	}
	return ""
}
