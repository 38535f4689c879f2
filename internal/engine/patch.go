package engine

import (
	"fmt"
	"slices"

	"github.com/morph-dev/morph/internal/jsonvalue"
)

// PatchOperation is one RFC 6902 operation. Diff produces add, remove and replace only.
type PatchOperation struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// MarshalJSON writes value for add and replace even when it is null.
func (p PatchOperation) MarshalJSON() ([]byte, error) {
	return p.appendJSON(nil)
}

func (p PatchOperation) appendJSON(dst []byte) ([]byte, error) {
	dst = append(dst, `{"op":`...)
	dst = jsonvalue.AppendString(dst, p.Op)
	dst = append(dst, `,"path":`...)
	dst = jsonvalue.AppendString(dst, p.Path)
	if p.Op != "remove" {
		dst = append(dst, `,"value":`...)
		var err error
		if dst, err = jsonvalue.Append(dst, p.Value); err != nil {
			return nil, fmt.Errorf("patch operation %s %s: %w", p.Op, p.Path, err)
		}
	}
	return append(dst, '}'), nil
}

// Patch is an RFC 6902 JSON Patch.
type Patch []PatchOperation

// JSON encodes the patch; an empty patch is "[]". The bytes are json.Marshal's.
func (p Patch) JSON() ([]byte, error) {
	// About 100 bytes an operation: one allocation for most patches, not one per doubling.
	return p.AppendJSON(make([]byte, 0, 2+100*len(p)))
}

// AppendJSON appends the patch's JSON encoding to dst (see JSON).
func (p Patch) AppendJSON(dst []byte) ([]byte, error) {
	dst = append(dst, '[')
	for i, op := range p {
		if i > 0 {
			dst = append(dst, ',')
		}
		var err error
		if dst, err = op.appendJSON(dst); err != nil {
			return nil, err
		}
	}
	return append(dst, ']'), nil
}

// maxLCSCells bounds the work of aligning two lists; longer lists are patched element by
// element, which is still correct, only longer.
const maxLCSCells = 1 << 16

// Diff returns the patch that turns from into to. Subtrees shared by both (the engine's
// copy on write leaves every unchanged container shared) cost nothing. Map keys are
// visited in sorted order, so the same inputs always give the same patch.
func Diff(from, to map[string]any) Patch {
	var p Patch
	diffMaps(&p, "", from, to)
	return p
}

func diffValue(p *Patch, ptr string, a, b any) {
	switch x := a.(type) {
	case map[string]any:
		if y, ok := b.(map[string]any); ok {
			diffMaps(p, ptr, x, y)
			return
		}
	case []any:
		if y, ok := b.([]any); ok {
			diffLists(p, ptr, x, y)
			return
		}
	}
	if !Equal(a, b) {
		*p = append(*p, PatchOperation{Op: "replace", Path: ptr, Value: b})
	}
}

func diffMaps(p *Patch, ptr string, a, b map[string]any) {
	if len(a) > 0 && len(b) > 0 && mapID(a) == mapID(b) {
		return
	}
	// Only keys whose values differ need a pointer; most keys of a changed map are
	// shared with the original, so they are skipped before any allocation.
	var keys []string
	for k, av := range a {
		if bv, ok := b[k]; !ok || !same(av, bv) {
			keys = append(keys, k)
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		av, inA := a[k]
		bv, inB := b[k]
		switch {
		case !inB:
			*p = append(*p, PatchOperation{Op: "remove", Path: AppendPointer(ptr, k)})
		case !inA:
			*p = append(*p, PatchOperation{Op: "add", Path: AppendPointer(ptr, k), Value: bv})
		default:
			diffValue(p, AppendPointer(ptr, k), av, bv)
		}
	}
}

// same is a cheap equality test that never allocates: the same container, or equal
// scalars. Containers that are not the same are compared by diffValue.
func same(a, b any) bool {
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		return ok && len(x) == len(y) && (len(x) == 0 || mapID(x) == mapID(y))
	case []any:
		y, ok := b.([]any)
		return ok && len(x) == len(y) && (len(x) == 0 || listID(x) == listID(y))
	}
	return Equal(a, b)
}

// diffLists patches a into b. Elements kept in place are diffed recursively; when the
// lengths differ, a longest common subsequence of equal elements decides which elements
// are removed and which are added, so that removing one argument is one operation.
func diffLists(p *Patch, ptr string, a, b []any) {
	if len(a) == len(b) {
		if len(a) > 0 && listID(a) == listID(b) {
			return
		}
		for i := range a {
			diffValue(p, AppendIndex(ptr, i), a[i], b[i])
		}
		return
	}
	if len(a)*len(b) > maxLCSCells {
		n := min(len(a), len(b))
		for i := 0; i < n; i++ {
			diffValue(p, AppendIndex(ptr, i), a[i], b[i])
		}
		for i := len(a) - 1; i >= n; i-- {
			*p = append(*p, PatchOperation{Op: "remove", Path: AppendIndex(ptr, i)})
		}
		for i := n; i < len(b); i++ {
			*p = append(*p, PatchOperation{Op: "add", Path: AppendIndex(ptr, i), Value: b[i]})
		}
		return
	}
	// lcs[i][j] is the LCS length of a[i:] and b[j:].
	w := len(b) + 1
	lcs := make([]int, (len(a)+1)*w)
	for i := len(a) - 1; i >= 0; i-- {
		for j := len(b) - 1; j >= 0; j-- {
			if Equal(a[i], b[j]) {
				lcs[i*w+j] = lcs[(i+1)*w+j+1] + 1
			} else {
				lcs[i*w+j] = max(lcs[(i+1)*w+j], lcs[i*w+j+1])
			}
		}
	}
	// Walk the alignment; idx is the position in the list as patched so far.
	i, j, idx := 0, 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case i < len(a) && j < len(b) && Equal(a[i], b[j]):
			i, j, idx = i+1, j+1, idx+1
		case i < len(a) && j < len(b) && lcs[i*w+j] == lcs[(i+1)*w+j+1]:
			// Pairing the two costs no common element: change a[i] into b[j] in place.
			diffValue(p, AppendIndex(ptr, idx), a[i], b[j])
			i, j, idx = i+1, j+1, idx+1
		case j < len(b) && (i == len(a) || lcs[i*w+j+1] >= lcs[(i+1)*w+j]):
			*p = append(*p, PatchOperation{Op: "add", Path: AppendIndex(ptr, idx), Value: b[j]})
			j, idx = j+1, idx+1
		default:
			*p = append(*p, PatchOperation{Op: "remove", Path: AppendIndex(ptr, idx)})
			i++
		}
	}
}
