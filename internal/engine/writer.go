package engine

import (
	"maps"
	"unsafe"
)

// Writer gives one mutator invocation copy-on-write access to the object. A container
// returned by Map, List or New* belongs to the current invocation and may be written in
// place; any other container must be passed through Map or List first, which copies it
// once. The engine resets the Writer before every invocation.
type Writer struct {
	owned []unsafe.Pointer
	paths []string
}

// NewWriter returns an empty Writer, for dialect tests and for code that mutates outside
// the engine.
func NewWriter() *Writer { return &Writer{} }

func (w *Writer) reset() {
	w.owned = w.owned[:0]
	w.paths = w.paths[:0]
}

func mapID(m map[string]any) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&m)) }

func listID(l []any) unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(l)) }

func (w *Writer) owns(p unsafe.Pointer) bool {
	for _, o := range w.owned {
		if o == p {
			return true
		}
	}
	return false
}

// Map returns m if this invocation owns it, else an owned copy (a new map for nil).
func (w *Writer) Map(m map[string]any) map[string]any {
	if m != nil && w.owns(mapID(m)) {
		return m
	}
	var c map[string]any
	if m == nil {
		c = make(map[string]any, 4)
	} else {
		c = maps.Clone(m)
	}
	w.owned = append(w.owned, mapID(c))
	return c
}

// NewMap returns an empty owned map.
func (w *Writer) NewMap(size int) map[string]any {
	c := make(map[string]any, size)
	w.owned = append(w.owned, mapID(c))
	return c
}

// List returns l if this invocation owns it, else an owned copy with room for extra
// more elements.
func (w *Writer) List(l []any, extra int) []any {
	if len(l) > 0 && w.owns(listID(l)) && cap(l)-len(l) >= extra {
		return l
	}
	c := make([]any, len(l), len(l)+extra)
	copy(c, l)
	if cap(c) > 0 {
		w.owned = append(w.owned, listID(c))
	}
	return c
}

// Changed records that the value at the JSON Pointer ptr changed.
func (w *Writer) Changed(ptr string) { w.paths = append(w.paths, ptr) }

// Paths returns the paths recorded so far in this invocation.
func (w *Writer) Paths() []string { return w.paths }

// HasChanges reports whether this invocation recorded a change.
func (w *Writer) HasChanges() bool { return len(w.paths) > 0 }
