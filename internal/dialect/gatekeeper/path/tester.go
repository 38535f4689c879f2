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
	// keys[i] is the list node of a test that names one element where the location
	// has a glob; the test then concerns that element only.
	keys []*Node
	// mustExistFrom[i] holds when some depth >= i has MustExist: then a missing node at
	// depth i must not be created, since what lies below it would not exist either.
	mustExistFrom []bool
}

// NewTester compiles tests for location. Each subPath must be a prefix of (or equal to)
// the location; two tests of one depth must agree; a MustNotExist above a MustExist can
// never hold and is rejected. The error names the index of the offending test.
func NewTester(location Path, tests []Test) (*Tester, error) {
	t := &Tester{conds: make([]Condition, len(location.Nodes)), keys: make([]*Node, len(location.Nodes)), mustExistFrom: make([]bool, len(location.Nodes)+1)}
	for i, tc := range tests {
		if len(tc.SubPath.Nodes) == 0 {
			return nil, fmt.Errorf("[%d].subPath: empty", i)
		}
		if !location.HasPrefix(tc.SubPath) {
			return nil, fmt.Errorf("[%d].subPath: %q is not a prefix of the location %q", i, tc.SubPath.String(), location.String())
		}
		if tc.Condition != MustExist && tc.Condition != MustNotExist {
			return nil, fmt.Errorf("[%d].condition: use MustExist or MustNotExist", i)
		}
		d := len(tc.SubPath.Nodes) - 1
		if prev := t.conds[d]; prev != None && prev != tc.Condition {
			return nil, fmt.Errorf("[%d]: %s contradicts the earlier %s test of %q", i, tc.Condition, prev, tc.SubPath.String())
		}
		t.conds[d] = tc.Condition
		for j, n := range tc.SubPath.Nodes {
			if n.Kind == List && !n.Glob && location.Nodes[j].Glob {
				if j != d {
					return nil, fmt.Errorf("[%d].subPath: %q names one element (%s) where the location has a glob; such a test must end at that element", i, tc.SubPath.String(), tc.SubPath.Prefix(j+1))
				}
				n := n
				t.keys[d] = &n
			}
		}
	}
	for i := len(t.conds) - 1; i >= 0; i-- {
		t.mustExistFrom[i] = t.mustExistFrom[i+1] || t.conds[i] == MustExist
	}
	for i, c := range t.conds {
		if c == MustNotExist && t.mustExistFrom[i+1] {
			return nil, fmt.Errorf("%q must not exist while a path below it must exist: the mutation could never apply", location.Prefix(i+1))
		}
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

// AllowsElement is Allows for an existing element of a glob, given its key value: a
// test that names another element does not concern it.
func (t *Tester) AllowsElement(depth int, key any) bool {
	if t == nil || len(t.conds) == 0 {
		return true
	}
	if k := t.keys[depth]; k != nil && !k.KeyMatches(key) {
		return true
	}
	return t.Allows(depth, true)
}

// Condition returns the test of a depth.
func (t *Tester) Condition(depth int) Condition {
	if t == nil || depth >= len(t.conds) {
		return None
	}
	return t.conds[depth]
}
