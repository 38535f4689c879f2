package gatekeeper

import (
	"strings"
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
		for _, name := range o.Replaced {
			if _, refused := m.Refused[name]; refused {
				return true
			}
		}
		return false
	}},
	// unknown-scope: a match.scope other than Cluster, Namespaced or * (such as
	// "cluster"). Gatekeeper's CRD does not restrict it and its scopeMatch treats it as
	// matching everything; morph refuses it at load.
	{"unknown-scope", func(c Case, m morphResult, o oracleResult) bool {
		return admittedOnlyByGatekeeper(m, o, "spec.match.scope: Unsupported value")
	}},
	// invalid-selector: a labelSelector or namespaceSelector that does not parse.
	// Gatekeeper accepts the mutator and fails each request it is matched against;
	// morph refuses it at load.
	{"invalid-selector", func(c Case, m morphResult, o oracleResult) bool {
		return admittedOnlyByGatekeeper(m, o, "spec.match.labelSelector") || admittedOnlyByGatekeeper(m, o, "spec.match.namespaceSelector")
	}},
}

// admittedOnlyByGatekeeper reports whether morph refused a document with an error
// containing text while Gatekeeper admitted it (in force, inert by a schema conflict, or
// replaced): what follows from that mutator then differs in ways no other check
// explains.
func admittedOnlyByGatekeeper(m morphResult, o oracleResult, text string) bool {
	for name, e := range m.Refused {
		if !strings.Contains(e, text) {
			continue
		}
		refused := false
		for _, r := range o.Refused {
			if r.Kind+"/"+r.Name == name {
				refused = true
			}
		}
		if !refused {
			return true
		}
	}
	return false
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
