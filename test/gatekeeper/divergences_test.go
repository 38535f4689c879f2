package gatekeeper

import (
	"strings"

	"github.com/morph-dev/morph/internal/policy"
)

// A divergence is a documented class of cases where morph deliberately answers
// differently from Gatekeeper (docs/dialects.md, "Divergences from Gatekeeper"). The
// differential test skips a differing case only when one of these recognises it; each
// checks what morph does in its class, so that a class never hides another difference.
type divergence struct {
	name    string
	applies func(c Case, m morphResult, o oracleResult) bool
}

var divergences = []divergence{
	// duplicate-name: two documents of one kind with one name. Gatekeeper keeps the
	// later one (a second kubectl apply replaces the first); morph refuses the second, since
	// in a folder of policies it is a mistake, not an update.
	{"duplicate-name", func(c Case, m morphResult, o oracleResult) bool {
		if len(o.Replaced) == 0 {
			return false
		}
		for _, e := range m.LoadErrors {
			if strings.Contains(e, "names must be unique") {
				return true
			}
		}
		return false
	}},
}

// classify returns the name of the divergence that explains a differing case, or "".
func classify(c Case, m morphResult, o oracleResult) string {
	for _, d := range divergences {
		if d.applies(c, m, o) {
			return d.name
		}
	}
	return ""
}

// documents decodes a case's mutators (for the classifiers and the minimiser).
func documents(c Case) []policy.Document {
	docs, err := policy.Decode("case.yaml", []byte(c.Mutators))
	if err != nil {
		return nil
	}
	return docs
}
