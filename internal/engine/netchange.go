package engine

import (
	"strconv"
	"strings"
)

// netChanged reports whether any of the JSON Pointers in paths holds a different value
// (or exists in one object only) in after than in before. The engine calls it at the
// end of a pass with the paths the pass's mutators said they changed: mutators that
// undo each other within a pass (two Assigns of one field, a field set and then its
// whole element replaced) leave no net change, and the object has converged, as
// Gatekeeper decides by comparing the object before and after a pass
// (pkg/mutation/system.go, System.mutate). Comparing only the recorded paths keeps the
// check proportional to what changed.
func netChanged(before, after map[string]any, paths []string) bool {
	for _, p := range paths {
		a, aok := lookup(before, p)
		b, bok := lookup(after, p)
		if aok != bok || (aok && !Equal(a, b)) {
			return true
		}
	}
	return false
}

// lookup resolves a JSON Pointer ("" is the whole object) in obj.
func lookup(obj map[string]any, ptr string) (any, bool) {
	var cur any = obj
	for ptr != "" {
		if ptr[0] != '/' {
			return nil, false
		}
		ptr = ptr[1:]
		seg := ptr
		if i := strings.IndexByte(ptr, '/'); i >= 0 {
			seg, ptr = ptr[:i], ptr[i:]
		} else {
			ptr = ""
		}
		switch c := cur.(type) {
		case map[string]any:
			if strings.IndexByte(seg, '~') >= 0 {
				seg = strings.NewReplacer("~1", "/", "~0", "~").Replace(seg)
			}
			v, ok := c[seg]
			if !ok {
				return nil, false
			}
			cur = v
		case []any:
			i, err := strconv.Atoi(seg)
			if err != nil || i < 0 || i >= len(c) {
				return nil, false
			}
			cur = c[i]
		default:
			return nil, false
		}
	}
	return cur, true
}

// disown forgets which containers the run owns, so that the next writes copy them and
// the object as it stands (the start of a pass) stays intact for netChanged.
func (w *Writer) disown() {
	w.owned = w.owned[:0]
	w.ownedSet = nil
}

// passSettles reports whether a pass that changed something has converged all the same:
// every mutator that changed it is reinvoked until convergence (ReinvokeIfNeeded, which
// is Gatekeeper's), no ReinvokeOnce mutator would run in the next pass, and the paths
// the changers named hold what they held before the pass. Otherwise kube-apiserver's
// rule stays (any reported change reinvokes), so that CEL and Katalog policies behave
// exactly as before.
//
// changersSettle says whether every changer is ReinvokeIfNeeded; changes are the pass's
// entries of the trace.
func passSettles(cands []*compiled, changersSettle bool, changes []Change, pass int, before, after map[string]any) bool {
	if !changersSettle {
		return false
	}
	for _, c := range cands {
		if c.Reinvocation == ReinvokeOnce && runs(c.Reinvocation, pass+1) {
			return false
		}
	}
	for _, c := range changes {
		if netChanged(before, after, c.Paths) {
			return false
		}
	}
	return true
}
