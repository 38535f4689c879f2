package policies

import (
	"errors"
	"fmt"
	"strings"

	"github.com/morph-dev/morph/internal/policy"
)

// Reasons of the Ready condition.
const (
	ReasonCompiled             = "Compiled"
	ReasonCompiledWithWarnings = "CompiledWithWarnings"
	ReasonCompileError         = "CompileError"
	ReasonSkipped              = "Skipped"
)

// maxRounds bounds the compile rounds of compileIsolated: each round drops the policies
// that failed, and a round can only fail on policies that compiled in the one before.
const maxRounds = 4

// compileIsolated compiles the policies together (the dialects check some things across
// documents, such as Gatekeeper's schema conflicts) and leaves out each policy that is
// rejected, so that the bundle serves every other policy. A policy's errors are located
// at its own document; an error that names no document is pinned to the policies that
// fail when compiled alone. The result has one Outcome per policy.
func compileIsolated(loader *policy.Loader, objs []policyObject) (*policy.Bundle, []Outcome, []string) {
	byFile := make(map[string]int, len(objs))
	for i, o := range objs {
		byFile[o.doc.File] = i
	}
	failed := map[int][]string{}
	var notes []string
	bundle := &policy.Bundle{}
	for round := 0; round < maxRounds; round++ {
		docs := make([]policy.Document, 0, len(objs))
		for i, o := range objs {
			if _, bad := failed[i]; !bad {
				docs = append(docs, o.doc)
			}
		}
		var err error
		bundle, _, err = loader.Load(docs)
		if err == nil {
			break
		}
		progress := false
		for _, e := range policy.Errors(err) {
			i, ok := locate(e, byFile)
			if !ok {
				culprits := failAlone(loader, objs, failed, e.Error())
				for _, j := range culprits {
					failed[j] = append(failed[j], e.Error())
					progress = true
				}
				if len(culprits) == 0 {
					notes = append(notes, fmt.Sprintf("an error names no policy: %v", e))
				}
				continue
			}
			failed[i] = append(failed[i], e.Error())
			progress = true
		}
		if !progress {
			break
		}
	}
	skipped := map[int][]string{}
	for _, sk := range bundle.Skipped {
		if i, ok := byFile[sk.Doc.File]; ok {
			skipped[i] = append(skipped[i], sk.Reason)
		}
	}
	outcomes := make([]Outcome, len(objs))
	for i, o := range objs {
		out := Outcome{Ref: o.ref, Generation: o.gen, Ready: true, Reason: ReasonCompiled}
		var warnings []string
		for _, w := range bundle.Warnings {
			if mentions(w, o.doc) {
				warnings = append(warnings, w)
			}
		}
		switch {
		case len(failed[i]) > 0:
			out.Ready, out.Reason, out.Message = false, ReasonCompileError, strings.Join(failed[i], "\n")
		case len(skipped[i]) > 0:
			out.Ready, out.Reason, out.Message = false, ReasonSkipped, strings.Join(skipped[i], "\n")
		case len(warnings) > 0:
			out.Reason, out.Message = ReasonCompiledWithWarnings, strings.Join(warnings, "\n")
		}
		outcomes[i] = out
	}
	notes = append(notes, bundle.Warnings...)
	return bundle, outcomes, notes
}

// locate finds the policy a loader error is about, by the document it names.
func locate(err error, byFile map[string]int) (int, bool) {
	var pe *policy.Error
	if !errors.As(err, &pe) {
		return 0, false
	}
	i, ok := byFile[pe.Doc.File]
	return i, ok
}

// failAlone compiles each policy not yet failed on its own and returns those that fail
// with the error text.
func failAlone(loader *policy.Loader, objs []policyObject, failed map[int][]string, text string) []int {
	var out []int
	for i, o := range objs {
		if _, bad := failed[i]; bad {
			continue
		}
		_, _, err := loader.Load([]policy.Document{o.doc})
		for _, e := range policy.Errors(err) {
			if e.Error() == text {
				out = append(out, i)
				break
			}
		}
	}
	return out
}

// mentions reports whether a load warning is about the document: it starts with the
// document's location, or names its file (Gatekeeper's schema conflicts name every
// mutator in conflict as "Kind "name" (file: document N)").
func mentions(warning string, d policy.Document) bool {
	return strings.HasPrefix(warning, d.Where()) || strings.Contains(warning, d.File+": document ")
}
