package engine

import (
	"fmt"
	"maps"
	"unsafe"
)

// Writer gives mutators copy-on-write access to the object. A container returned by Map,
// List or New* belongs to the current run and may be written in place; any other
// container must be passed through Map or List first, which copies it once.
//
// A Writer is valid only during the call it is passed to: the engine recycles it for
// later requests once the request is done, so a policy must not keep it.
//
// Ownership lasts for the whole run of a request, across mutators and passes: a
// container one mutator copied is written in place by the next. That is safe because the
// original object is never owned, and a run in which a mutator fails starts again from
// the original with a fresh Writer. The changed paths are per invocation.
//
// Every write is charged to the Writer's byte budget: copies made by Map, List and
// NewMap are charged by the engine itself, and a mutator charges the values it creates
// (strings, rendered templates) with Charge. A run that spends more than the budget
// fails (see BudgetError), so that no policy can make one request hold unbounded memory.
type Writer struct {
	owned    []unsafe.Pointer
	ownedSet map[unsafe.Pointer]struct{} // replaces the slice scan once many are owned
	paths    []string
	warnings []string
	notes    []Note
	// budget is the run's byte budget (0: DefaultWriteBudget); spent what the run wrote.
	budget, spent int64
}

// BudgetError is the error of a policy that wrote more than the request's write budget.
type BudgetError struct {
	Budget int64
}

func (e *BudgetError) Error() string {
	return fmt.Sprintf("wrote more than the request's budget of %d bytes", e.Budget)
}

// The bytes charged for each copied or created container entry: a map entry (key
// header, value interface, bucket overhead) and a list element (an interface).
const (
	mapEntryBytes  = 48
	listEntryBytes = 16
)

// Charge adds n bytes to what the run wrote and returns a *BudgetError once the
// budget is spent. A mutator charges the values it creates; the engine also checks the
// budget after every call, so a mutator that ignores the error still fails.
func (w *Writer) Charge(n int) error {
	if n > 0 {
		w.spent += int64(n)
	}
	if w.spent > w.limit() {
		return &BudgetError{Budget: w.limit()}
	}
	return nil
}

// ChargeValue charges the bytes of a value a mutator stores (strings by their length,
// maps and lists by their entries, recursively) and returns a *BudgetError once the
// budget is spent. It stops walking as soon as the budget is spent, so charging a huge
// value costs no more than the budget.
func (w *Writer) ChargeValue(v any) error {
	w.spent += valueBytes(v, w.limit()-w.spent+1)
	return w.overBudget()
}

// valueBytes sizes v, stopping once the size passes limit.
func valueBytes(v any, limit int64) int64 {
	switch x := v.(type) {
	case string:
		return int64(len(x))
	case map[string]any:
		n := int64(len(x)) * mapEntryBytes
		for k, e := range x {
			if n > limit {
				return n
			}
			n += int64(len(k)) + valueBytes(e, limit-n)
		}
		return n
	case []any:
		n := int64(len(x)) * listEntryBytes
		for _, e := range x {
			if n > limit {
				return n
			}
			n += valueBytes(e, limit-n)
		}
		return n
	}
	return 8
}

// Remaining is how many bytes the run may still write (0 when the budget is spent).
func (w *Writer) Remaining() int64 { return max(w.limit()-w.spent, 0) }

func (w *Writer) limit() int64 {
	if w.budget > 0 {
		return w.budget
	}
	return DefaultWriteBudget
}

// overBudget reports the budget error of a run that spent too much, or nil.
func (w *Writer) overBudget() error {
	if w.spent > w.limit() {
		return &BudgetError{Budget: w.limit()}
	}
	return nil
}

// ownedScanLimit is how many owned containers are scanned linearly before a map is used.
const ownedScanLimit = 16

// NewWriter returns an empty Writer, for dialect tests and for code that mutates outside
// the engine.
func NewWriter() *Writer { return &Writer{} }

// maxPooledEntries bounds what a recycled Writer keeps: one that grew past it on a large
// object is left to the garbage collector rather than held for every later request.
const maxPooledEntries = 1024

// writer returns a Writer for one request's run with the request's budget, recycled
// from a finished request when one is free: a Writer per request was one of the three
// allocations of a request that no policy matches. Recycling is safe because the engine
// calls policies synchronously and a policy may use the Writer only during its call, so
// once Mutate returns nothing holds it.
func (s *Set) writer(budget int64) *Writer {
	w, _ := s.writers.Get().(*Writer)
	if w == nil {
		w = &Writer{}
	}
	w.budget = budget
	return w
}

// release gives w back for a later request, holding no pointer into this one: the
// containers it owned, the paths, warnings and notes are cleared, not only truncated.
func (s *Set) release(w *Writer) {
	if cap(w.owned) > maxPooledEntries || cap(w.paths) > maxPooledEntries || cap(w.warnings) > maxPooledEntries || cap(w.notes) > maxPooledEntries {
		return
	}
	clear(w.owned[:cap(w.owned)])
	clear(w.paths[:cap(w.paths)])
	clear(w.warnings[:cap(w.warnings)])
	clear(w.notes[:cap(w.notes)])
	w.reset()
	w.budget = 0
	s.writers.Put(w)
}

// reset forgets everything: the start of a run.
func (w *Writer) reset() {
	w.owned = w.owned[:0]
	w.ownedSet = nil
	w.paths = w.paths[:0]
	w.warnings = w.warnings[:0]
	w.notes = w.notes[:0]
	w.spent = 0
}

// startInvocation clears the changed paths for the next mutator; ownership stays.
func (w *Writer) startInvocation() {
	w.paths = w.paths[:0]
	w.warnings = w.warnings[:0]
	w.notes = w.notes[:0]
}

// Warn records a warning for the user (a part of a policy that failed and was ignored,
// for example). The engine adds it to Result.Warnings once, however many passes repeat it.
func (w *Writer) Warn(text string) { w.warnings = append(w.warnings, text) }

// Note records a fact about this request (an event to emit, an exemption, a skipped
// rule, rewritten expressions). The engine sets the note's ID to the policy's and adds
// it to Result.Notes once, however many passes repeat it.
func (w *Writer) Note(n Note) { w.notes = append(w.notes, n) }

func mapID(m map[string]any) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&m)) }

func listID(l []any) unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(l)) }

func (w *Writer) owns(p unsafe.Pointer) bool {
	if w.ownedSet != nil {
		_, ok := w.ownedSet[p]
		return ok
	}
	for _, o := range w.owned {
		if o == p {
			return true
		}
	}
	return false
}

func (w *Writer) own(p unsafe.Pointer) {
	if w.ownedSet != nil {
		w.ownedSet[p] = struct{}{}
		return
	}
	w.owned = append(w.owned, p)
	if len(w.owned) > ownedScanLimit {
		w.ownedSet = make(map[unsafe.Pointer]struct{}, 2*len(w.owned))
		for _, o := range w.owned {
			w.ownedSet[o] = struct{}{}
		}
	}
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
		w.spent += int64(len(m)) * mapEntryBytes
	}
	w.own(mapID(c))
	return c
}

// NewMap returns an empty owned map.
func (w *Writer) NewMap(size int) map[string]any {
	c := make(map[string]any, size)
	w.spent += int64(size) * mapEntryBytes
	w.own(mapID(c))
	return c
}

// List returns l if this invocation owns it, else an owned copy with room for extra
// more elements.
func (w *Writer) List(l []any, extra int) []any {
	if len(l) > 0 && w.owns(listID(l)) && cap(l)-len(l) >= extra {
		return l
	}
	size := len(l) + extra
	if len(l) > 0 && w.owns(listID(l)) {
		// An owned list that must grow: grow it geometrically, so that appending one
		// element at a time costs (and is charged) linear, not quadratic, bytes.
		size = max(size, 2*cap(l))
	}
	c := make([]any, len(l), size)
	copy(c, l)
	w.spent += int64(size) * listEntryBytes
	if cap(c) > 0 {
		w.own(listID(c))
	}
	return c
}

// Changed records that the value at the JSON Pointer ptr changed.
func (w *Writer) Changed(ptr string) { w.paths = append(w.paths, ptr) }

// Paths returns the paths recorded so far in this invocation.
func (w *Writer) Paths() []string { return w.paths }

// HasChanges reports whether this invocation recorded a change.
func (w *Writer) HasChanges() bool { return len(w.paths) > 0 }
