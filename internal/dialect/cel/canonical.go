package cel

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/morph-dev/morph/internal/engine"
)

// canonical returns obj as the API server's admission plugins see a built-in object:
// decoded into its Go type (k8s.io/api) and converted back to unstructured, so that
// quantities are canonical ("0.5" is "500m", "0.5Gi" is "512Mi"), unknown fields are
// gone and fields that are never omitted are present (status: {}). apiVersion and kind
// stay as obj has them. The result is a new object sharing nothing with obj. Its numbers
// are those of the API server's own conversion: int64 for every integer field, float64
// for the (rare) floating-point ones, so CEL sees the types the API server's CEL sees.
//
// Kinds the client-go scheme does not know (custom resources) come back as given, as the
// API server hands them to policies. So does an object that does not fit its Go type (a
// string where the type has a list, a fraction where it has an integer): the API server
// would reject it before admission, and offline the policy still sees what was written.
func canonical(obj map[string]any, fallback schema.GroupVersionKind) map[string]any {
	if obj == nil {
		return nil
	}
	gvk := fallback
	if apiVersion, ok := obj["apiVersion"].(string); ok {
		if kind, ok := obj["kind"].(string); ok {
			gvk = schema.FromAPIVersionAndKind(apiVersion, kind)
		}
	}
	typed, err := scheme.Scheme.New(gvk)
	if err != nil {
		return obj
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj, typed); err != nil {
		return obj
	}
	out, err := runtime.DefaultUnstructuredConverter.ToUnstructured(typed)
	if err != nil {
		return obj
	}
	for _, k := range []string{"apiVersion", "kind"} {
		if v, ok := obj[k]; ok {
			out[k] = v
		} else {
			delete(out, k)
		}
	}
	return out
}

// applyChanges applies to orig the patch p, computed from the canonical form of orig to
// out (the policy's result), so that the result holds orig's own values wherever the
// policy changed nothing.
//
// Each operation is checked against orig as patched so far, which can lack what the
// canonical form has (status: {}, resources: {}) or hold something else there: a
// replace or remove of a member orig lacks becomes an add or nothing, and an operation
// below a container orig lacks sets, or removes, the nearest missing ancestor whole from
// out instead (later operations below it are then part of that value). Paths in p index
// lists as patched so far, which for every operation is also the index in out, the
// final list, since engine.Diff emits a list's operations in ascending order.
func applyChanges(orig, out map[string]any, p engine.Patch, w *engine.Writer) (map[string]any, error) {
	cur := orig
	var whole [][]string // ancestors already set whole from out
	for _, op := range p {
		segs, err := splitPointer(op.Path)
		if err != nil {
			return nil, fmt.Errorf("%s %q: %w", op.Op, op.Path, err)
		}
		if len(segs) == 0 {
			return nil, fmt.Errorf("%s %q: the patch changes the whole object", op.Op, op.Path)
		}
		if coveredBy(segs, whole) {
			continue
		}
		adapted, lifted, skip := rebaseOp(cur, out, op, segs)
		if lifted != nil {
			whole = append(whole, lifted)
		}
		if skip {
			continue
		}
		if err := w.ChargeValue(adapted.Value); err != nil {
			return nil, err
		}
		cur, err = applyPatch(cur, engine.Patch{adapted}, w)
		if err != nil {
			return nil, err
		}
	}
	return cur, nil
}

// coveredBy reports whether segs is at or below one of the paths in whole.
func coveredBy(segs []string, whole [][]string) bool {
	for _, prefix := range whole {
		if len(prefix) <= len(segs) && equalSegments(prefix, segs[:len(prefix)]) {
			return true
		}
	}
	return false
}

func equalSegments(a, b []string) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return len(a) == len(b)
}

// rebaseOp adapts one operation of the canonical patch to cur (see applyChanges). lifted
// is the path of the ancestor set whole instead, if any; skip means cur is already as
// the operation wants it.
func rebaseOp(cur, out map[string]any, op engine.PatchOperation, segs []string) (adapted engine.PatchOperation, lifted []string, skip bool) {
	var parent any = cur
	for i, seg := range segs[:len(segs)-1] {
		next, ok := child(parent, seg)
		if !ok || !isContainer(next) {
			return liftOp(cur, out, segs[:i+1])
		}
		parent = next
	}
	last := segs[len(segs)-1]
	switch x := parent.(type) {
	case map[string]any:
		_, has := x[last]
		switch {
		case op.Op == "replace" && !has:
			op.Op = "add"
		case op.Op == "remove" && !has:
			return op, nil, true
		}
		return op, nil, false
	case []any:
		if listOpFits(op.Op, last, len(x)) {
			return op, nil, false
		}
	}
	return liftOp(cur, out, segs[:len(segs)-1])
}

// listOpFits reports whether op applies at index key of a list of n elements.
func listOpFits(op, key string, n int) bool {
	if key == "-" {
		return op == "add"
	}
	i, err := listIndex(key)
	if err != nil {
		return false
	}
	if op == "add" {
		return i <= n
	}
	return i < n
}

// liftOp sets the value at path whole from out (removes it when out has none). path's
// parent exists in cur; when it is a list that path's index does not fit, the list itself
// is set whole.
func liftOp(cur, out map[string]any, path []string) (engine.PatchOperation, []string, bool) {
	for {
		parent, _ := lookup(cur, path[:len(path)-1])
		value, inOut := lookup(out, path)
		ptr := engine.Pointer(path...)
		key := path[len(path)-1]
		switch x := parent.(type) {
		case map[string]any:
			_, inCur := x[key]
			switch {
			case inOut:
				return engine.PatchOperation{Op: "add", Path: ptr, Value: value}, path, false
			case inCur:
				return engine.PatchOperation{Op: "remove", Path: ptr}, path, false
			}
			return engine.PatchOperation{}, path, true
		case []any:
			i, err := listIndex(key)
			switch {
			case err == nil && i < len(x) && inOut:
				return engine.PatchOperation{Op: "replace", Path: ptr, Value: value}, path, false
			case err == nil && i < len(x):
				return engine.PatchOperation{Op: "remove", Path: ptr}, path, false
			case err == nil && i == len(x) && inOut:
				return engine.PatchOperation{Op: "add", Path: ptr, Value: value}, path, false
			}
		}
		// The root is a map, so a list parent always has a parent of its own.
		path = path[:len(path)-1]
	}
}

// lookup returns the value at path in obj.
func lookup(obj map[string]any, path []string) (any, bool) {
	var cur any = obj
	for _, seg := range path {
		next, ok := child(cur, seg)
		if !ok {
			return nil, false
		}
		cur = next
	}
	return cur, true
}

// child returns the member key of a map, or the element at index key of a list.
func child(c any, key string) (any, bool) {
	switch x := c.(type) {
	case map[string]any:
		v, ok := x[key]
		return v, ok
	case []any:
		i, err := listIndex(key)
		if err != nil || i >= len(x) {
			return nil, false
		}
		return x[i], true
	}
	return nil, false
}

func isContainer(v any) bool {
	switch v.(type) {
	case map[string]any, []any:
		return true
	}
	return false
}

// applyPatch applies an RFC 6902 patch of add, replace and remove operations to obj,
// copy on write: every container on the way to a change is taken through w (obj itself
// is never written unless w owns it), and each operation's path is recorded with
// w.Changed. Values are inserted as they are, not copied.
func applyPatch(obj map[string]any, p engine.Patch, w *engine.Writer) (map[string]any, error) {
	for _, op := range p {
		segs, err := splitPointer(op.Path)
		if err != nil {
			return nil, fmt.Errorf("%s %q: %w", op.Op, op.Path, err)
		}
		if len(segs) == 0 {
			return nil, fmt.Errorf("%s %q: the root cannot be patched, only its members", op.Op, op.Path)
		}
		switch op.Op {
		case "add", "replace", "remove":
		default:
			return nil, fmt.Errorf("%s %q: unsupported operation (add, replace and remove are)", op.Op, op.Path)
		}
		next, err := patchAt(obj, segs, op, w)
		if err != nil {
			return nil, fmt.Errorf("%s %q: %w", op.Op, op.Path, err)
		}
		obj = next.(map[string]any)
		w.Changed(op.Path)
	}
	return obj, nil
}

// patchAt applies op at segs below the container c and returns c's writable copy.
func patchAt(c any, segs []string, op engine.PatchOperation, w *engine.Writer) (any, error) {
	key := segs[0]
	switch x := c.(type) {
	case map[string]any:
		v, has := x[key]
		if len(segs) > 1 {
			if !has {
				return nil, fmt.Errorf("no member %q", key)
			}
			nv, err := patchAt(v, segs[1:], op, w)
			if err != nil {
				return nil, err
			}
			m := w.Map(x)
			m[key] = nv
			return m, nil
		}
		if !has && op.Op != "add" {
			return nil, fmt.Errorf("no member %q", key)
		}
		m := w.Map(x)
		if op.Op == "remove" {
			delete(m, key)
		} else {
			m[key] = op.Value
		}
		return m, nil
	case []any:
		if key == "-" {
			if len(segs) > 1 || op.Op != "add" {
				return nil, errors.New(`"-" (the end of the list) can only be added to`)
			}
			return append(w.List(x, 1), op.Value), nil
		}
		i, err := listIndex(key)
		if err != nil {
			return nil, err
		}
		n := len(x)
		if len(segs) > 1 || op.Op != "add" {
			if i >= n {
				return nil, fmt.Errorf("index %d is out of range (the list has %d elements)", i, n)
			}
		} else if i > n {
			return nil, fmt.Errorf("index %d is out of range for add (the list has %d elements)", i, n)
		}
		if len(segs) > 1 {
			nv, err := patchAt(x[i], segs[1:], op, w)
			if err != nil {
				return nil, err
			}
			l := w.List(x, 0)
			l[i] = nv
			return l, nil
		}
		switch op.Op {
		case "add":
			l := append(w.List(x, 1), nil)
			copy(l[i+1:], l[i:])
			l[i] = op.Value
			return l, nil
		case "replace":
			l := w.List(x, 0)
			l[i] = op.Value
			return l, nil
		default:
			l := w.List(x, 0)
			copy(l[i:], l[i+1:])
			l[n-1] = nil
			return l[:n-1], nil
		}
	case nil:
		return nil, fmt.Errorf("no member %q in null", key)
	}
	return nil, fmt.Errorf("no member %q in a %s", key, valueKind(c))
}

func valueKind(v any) string {
	switch v.(type) {
	case string:
		return "string"
	case bool:
		return "boolean"
	}
	return "number"
}

// listIndex parses an RFC 6901 array index: decimal digits, without leading zeros.
func listIndex(key string) (int, error) {
	if key == "" || (len(key) > 1 && key[0] == '0') || strings.TrimLeft(key, "0123456789") != "" {
		return 0, fmt.Errorf("%q is not a list index", key)
	}
	i, err := strconv.Atoi(key)
	if err != nil {
		return 0, fmt.Errorf("%q is not a list index: %w", key, err)
	}
	return i, nil
}

// splitPointer splits an RFC 6901 JSON Pointer into its unescaped segments ("" is the
// root: no segment).
func splitPointer(ptr string) ([]string, error) {
	if ptr == "" {
		return nil, nil
	}
	if ptr[0] != '/' {
		return nil, fmt.Errorf("a JSON Pointer starts with \"/\"")
	}
	segs := strings.Split(ptr[1:], "/")
	for i, s := range segs {
		if !strings.Contains(s, "~") {
			continue
		}
		var b strings.Builder
		for j := 0; j < len(s); j++ {
			if s[j] != '~' {
				b.WriteByte(s[j])
				continue
			}
			if j+1 == len(s) || (s[j+1] != '0' && s[j+1] != '1') {
				return nil, fmt.Errorf("segment %q: \"~\" must be followed by 0 or 1", s)
			}
			if s[j+1] == '0' {
				b.WriteByte('~')
			} else {
				b.WriteByte('/')
			}
			j++
		}
		segs[i] = b.String()
	}
	return segs, nil
}
