package path

import "fmt"

// Condition is a pathTests condition.
type Condition uint8

// The conditions. None means no test at that depth.
const (
	None Condition = iota
	// MustExist: the node must already exist; it is never created.
	MustExist
	// MustNotExist: the node must be absent; an existing node stops the mutation.
	MustNotExist
)

// ParseCondition reads "MustExist" or "MustNotExist".
func ParseCondition(s string) (Condition, error) {
	switch s {
	case "MustExist":
		return MustExist, nil
	case "MustNotExist":
		return MustNotExist, nil
	}
	return None, fmt.Errorf("unknown condition %q: use MustExist or MustNotExist", s)
}

func (c Condition) String() string {
	switch c {
	case MustExist:
		return "MustExist"
	case MustNotExist:
		return "MustNotExist"
	}
	return "None"
}

// Test is one pathTests entry.
type Test struct {
	SubPath   Path
	Condition Condition
}

// Tester is the compiled pathTests of one location: the condition of each depth (the
// index of a node of the location) and whether a node at some depth or deeper must
// exist. The zero Tester (no tests) allows everything.
type Tester struct {
	conds []Condition
	// mustExistFrom[i] holds when some depth >= i has MustExist: then a missing node at
	// depth i must not be created, since what lies below it would not exist either.
	mustExistFrom []bool
}

// NewTester compiles tests for location with Gatekeeper's rules and words
// (pkg/mutation/path/tester/tester.go, New):
//   - each subPath must be a prefix of (or equal to) the location, node by node: a
//     [name: sidecar] where the location has [name: *] is not a prefix;
//   - two tests of one path must not disagree;
//   - a MustExist test listed after a MustNotExist test is refused, whatever their
//     depths (Gatekeeper compares the tests' positions in the list, not the paths).
//
// A MustExist below a MustNotExist listed first is accepted, as in Gatekeeper: the
// mutation can then never apply.
func NewTester(location Path, tests []Test) (*Tester, error) {
	t := &Tester{conds: make([]Condition, len(location.Nodes)), mustExistFrom: make([]bool, len(location.Nodes)+1)}
	for i, tc := range tests {
		if len(tc.SubPath.Nodes) == 0 {
			return nil, fmt.Errorf("[%d].subPath: empty", i)
		}
		if !location.HasPrefix(tc.SubPath) {
			return nil, fmt.Errorf("[%d].subPath: all subpaths must be a prefix of the `location` value of the mutation: subpath %q is not a prefix of location %q", i, tc.SubPath.String(), location.String())
		}
		if tc.Condition != MustExist && tc.Condition != MustNotExist {
			return nil, fmt.Errorf("[%d].condition: use MustExist or MustNotExist", i)
		}
	}
	lowestMustNot, highestMust := -1, -1
	for i, tc := range tests {
		d := len(tc.SubPath.Nodes) - 1
		if prev := t.conds[d]; prev != None && prev != tc.Condition {
			return nil, fmt.Errorf("[%d]: conflicting path test conditions: path %q is marked both MustExist and MustNotExist", i, tc.SubPath.String())
		}
		t.conds[d] = tc.Condition
		if tc.Condition == MustNotExist && lowestMustNot < 0 {
			lowestMustNot = i
		}
		if tc.Condition == MustExist {
			highestMust = i
		}
	}
	if lowestMustNot >= 0 && highestMust > lowestMustNot {
		return nil, fmt.Errorf("[%d]: conflicting path test conditions: path %q is marked MustExist but parent %q MustNotExist; list MustExist tests before MustNotExist tests",
			highestMust, tests[highestMust].SubPath.String(), tests[lowestMustNot].SubPath.String())
	}
	for i := len(t.conds) - 1; i >= 0; i-- {
		t.mustExistFrom[i] = t.mustExistFrom[i+1] || t.conds[i] == MustExist
	}
	return t, nil
}

// Allows reports whether the walk may go on at depth, given whether the node there
// exists: an existing node fails MustNotExist, and a missing one fails when it or a node
// below it must exist (it would have to be created).
func (t *Tester) Allows(depth int, exists bool) bool {
	if t == nil || len(t.conds) == 0 {
		return true
	}
	if exists {
		return t.conds[depth] != MustNotExist
	}
	return !t.mustExistFrom[depth]
}
