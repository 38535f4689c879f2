package gatekeeper

import (
	"flag"
	"fmt"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// The fixed seed set `make unit` runs; -seed and -n choose others for longer runs:
//
//	go test ./test/gatekeeper/ -run TestDifferential -args -seed 7 -n 20000
var (
	flagSeed  = flag.Uint64("seed", fixedSeed, "generator seed of the differential test")
	flagN     = flag.Int("n", fixedCases, "number of cases of the differential test")
	flagCase  = flag.Int("case", -1, "run only this case index of the seed")
	flagShown = flag.Int("show", 5, "how many differing cases to minimise and print")
)

const (
	fixedSeed  = 1
	fixedCases = 2400
)

// TestDifferential runs morph and Gatekeeper v3.23.1 on generated cases and fails on
// every case whose results differ, unless a documented divergence (divergences.go)
// explains it.
func TestDifferential(t *testing.T) {
	o := startOracle(t)
	var cases []Case
	if *flagCase >= 0 {
		cases = []Case{Generate(*flagSeed, *flagCase)}
	} else {
		for i := range *flagN {
			cases = append(cases, Generate(*flagSeed, i))
		}
	}
	results, err := o.runAll(cases)
	if err != nil {
		t.Fatal(err)
	}
	var s summary
	var differing []int
	for i, c := range cases {
		m := runMorph(c)
		v := compare(m, results[i])
		if v.Same {
			s.add(m, results[i], "")
			continue
		}
		if d := classify(c, m, results[i]); d != "" {
			s.add(m, results[i], d)
			continue
		}
		s.add(m, results[i], "DIFFERENT")
		differing = append(differing, i)
	}
	t.Logf("seed %d, %d cases: %s", *flagSeed, len(cases), s.String())
	for j, i := range differing {
		if j >= *flagShown {
			t.Errorf("... and %d more differing cases", len(differing)-j)
			break
		}
		c := minimise(t, o, cases[i])
		m, r := runMorph(c), mustRun(t, o, c)
		t.Errorf("case %s differs (go test ./test/gatekeeper/ -run TestDifferential -args -seed %d -case %d): %s\n%s",
			cases[i].Name, *flagSeed, i, compare(m, r).What, describeCase(c, m, r))
	}
}

func mustRun(t *testing.T, o *oracle, c Case) oracleResult {
	t.Helper()
	r, err := o.run(c)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// summary counts the outcomes of a run.
type summary struct {
	total, identical, bothFailed int
	classes                      map[string]int
	// What the cases exercised, by Gatekeeper's answer.
	mutated, refused, isolated, conflicts, notConverged int
}

func (s *summary) add(m morphResult, o oracleResult, class string) {
	s.total++
	if o.Object != nil && o.Mutated {
		s.mutated++
	}
	if len(o.Refused) > 0 {
		s.refused++
	}
	if len(o.Failed) > 0 {
		s.isolated++
	}
	if len(o.Conflicts) > 0 {
		s.conflicts++
	}
	if o.NotConverged {
		s.notConverged++
	}
	if s.classes == nil {
		s.classes = map[string]int{}
	}
	switch {
	case class != "":
		s.classes[class]++
	case o.Object == nil:
		s.bothFailed++
	default:
		s.identical++
	}
}

// Agreement is the share of cases where morph gave Gatekeeper's answer.
func (s *summary) agreement() float64 {
	if s.total == 0 {
		return 0
	}
	return 100 * float64(s.identical+s.bothFailed) / float64(s.total)
}

func (s *summary) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%.2f%% agree (%d identical objects, %d failing alike)", s.agreement(), s.identical, s.bothFailed)
	fmt.Fprintf(&b, "; Gatekeeper mutated %d, refused a mutator in %d, isolated a failing mutator in %d, saw schema conflicts in %d, did not converge in %d",
		s.mutated, s.refused, s.isolated, s.conflicts, s.notConverged)
	names := make([]string, 0, len(s.classes))
	for k := range s.classes {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		fmt.Fprintf(&b, ", %s: %d", k, s.classes[k])
	}
	return b.String()
}

func describeCase(c Case, m morphResult, o oracleResult) string {
	y := func(v any) string {
		out, err := yaml.Marshal(v)
		if err != nil {
			return err.Error()
		}
		return string(out)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "--- request: %s, namespace %q, source %s\n", c.Operation, c.RequestNamespace, c.Source)
	if c.Namespace != nil {
		fmt.Fprintf(&b, "--- namespace object:\n%s", y(c.Namespace))
	}
	fmt.Fprintf(&b, "--- object:\n%s--- mutators:\n%s\n", y(c.Object), c.Mutators)
	fmt.Fprintf(&b, "--- morph: accepted %v, failed %v, error %q, load errors:\n", m.Accepted, m.Failed, m.Error)
	for _, e := range m.LoadErrors {
		fmt.Fprintf(&b, "    %s\n", e)
	}
	if m.Object != nil {
		fmt.Fprintf(&b, "%s", y(m.Object))
	}
	fmt.Fprintf(&b, "--- gatekeeper: accepted %v, conflicts %v, failed %v, error %q, refused:\n", o.Accepted, o.Conflicts, o.Failed, o.Error)
	for _, r := range o.Refused {
		fmt.Fprintf(&b, "    document %d (%s %q) at %s: %s\n", r.Index+1, r.Kind, r.Name, r.Stage, r.Reason)
	}
	if o.Object != nil {
		fmt.Fprintf(&b, "%s", y(o.Object))
	}
	return b.String()
}
