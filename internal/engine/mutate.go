package engine

import (
	"context"
	"fmt"
	"slices"
)

// Mutate applies the set to req.Object and returns the result. The error is non-nil
// only when the request must fail: a FailClose mutator or finalizer failed, the object
// did not converge, or ctx ended.
func (s *Set) Mutate(ctx context.Context, req *Request) (*Result, error) {
	res := &Result{Object: req.Object}
	cands := applicable(s.candidates(req.Kind, req.Operation), req)
	if len(cands) > 0 {
		if err := s.converge(ctx, req, cands, res); err != nil {
			return nil, err
		}
	}
	if len(s.finalizers) > 0 {
		if err := s.finalize(ctx, req, res); err != nil {
			return nil, err
		}
	}
	if res.Object != nil && req.Object != nil {
		res.Patch = Diff(req.Object, res.Object)
	}
	return res, nil
}

// converge runs passes until the object stops changing. When a FailIgnore mutator fails,
// the run starts again from the original object without it, so that none of its changes
// (from any pass) survive and no other mutator saw them.
func (s *Set) converge(ctx context.Context, req *Request, cands []*compiled, res *Result) error {
	var skip []bool
	w := &Writer{budget: req.WriteBudget}
	// changedBy are the indices in cands of the mutators that changed the current pass.
	var changedBy []int
	// warnings are the mutators' own (Writer.Warn) of the current run; a restart
	// forgets them with the run, as it forgets res.Notes. Failure warnings come from
	// res.Failures.
	var warnings []string
	defer func() {
		for _, f := range res.Failures {
			res.Warnings = append(res.Warnings, fmt.Sprintf("%s skipped: %v", f.ID, f.Err))
		}
		res.Warnings = append(res.Warnings, warnings...)
	}()
restart:
	w.reset()
	obj := req.Object
	res.Trace = res.Trace[:0]
	res.Notes = res.Notes[:0]
	warnings = warnings[:0]
	maxPasses := len(cands) + 1
	if slices.ContainsFunc(cands, func(c *compiled) bool { return c.Reinvocation == ReinvokeOnce }) {
		// A mutator's second (and last) run may change the object in the last pass the
		// bound allows; one more pass lets the others react to it.
		maxPasses++
	}
	for pass := 1; pass <= maxPasses; pass++ {
		if !anyRuns(cands, pass) {
			// Nothing may run any more (only Never and Once mutators): the object is as
			// final as their policies allow.
			res.Object = obj
			return nil
		}
		changedBy = changedBy[:0]
		passStart := obj
		if pass > 1 {
			w.disown()
		}
		for i, c := range cands {
			if !runs(c.Reinvocation, pass) || (skip != nil && skip[i]) {
				continue
			}
			if err := Stopped(ctx); err != nil {
				return fmt.Errorf("mutation stopped in pass %d before %s: %w", pass, c.ID, err)
			}
			next, err := invoke(ctx, req, &c.Mutator, obj, w)
			if err != nil {
				if c.FailurePolicy == FailClose || isRequestDeadline(ctx) {
					// Past the request's own deadline nothing may run any more, whatever
					// the policy's failure policy: the request fails.
					return &MutatorError{ID: c.ID, Err: err}
				}
				if skip == nil {
					skip = make([]bool, len(cands))
				}
				skip[i] = true
				res.Failures = append(res.Failures, Failure{ID: c.ID, Err: err})
				goto restart
			}
			for _, text := range w.warnings {
				if !slices.Contains(warnings, text) {
					warnings = append(warnings, text)
				}
			}
			res.Notes = addNotes(res.Notes, c.ID, w.notes)
			if w.HasChanges() {
				obj = next
				res.Trace = append(res.Trace, Change{ID: c.ID, Pass: pass, Paths: slices.Clone(w.paths)})
				changedBy = append(changedBy, i)
			}
		}
		res.Passes = pass
		if len(changedBy) == 0 || passSettles(cands, changedBy, res.Trace, pass, passStart, obj) {
			res.Object = obj
			return nil
		}
		if pass == maxPasses {
			ids := make([]ID, len(changedBy))
			for j, i := range changedBy {
				ids[j] = cands[i].ID
			}
			return &NotConvergedError{Passes: pass, Mutators: ids}
		}
	}
	res.Object = obj
	return nil
}

// runs reports whether a mutator with this reinvocation policy runs in pass.
func runs(r Reinvocation, pass int) bool {
	switch r {
	case ReinvokeNever:
		return pass == 1
	case ReinvokeOnce:
		return pass <= 2
	}
	return true
}

func anyRuns(cands []*compiled, pass int) bool {
	return slices.ContainsFunc(cands, func(c *compiled) bool { return runs(c.Reinvocation, pass) })
}

// applicable keeps the candidates that run on this kind of request (see Applies). It
// allocates only when it drops one.
func applicable(cands []*compiled, req *Request) []*compiled {
	keep := func(c *compiled) bool { return Applies(&c.Descriptor, req) }
	for i, c := range cands {
		if keep(c) {
			continue
		}
		out := slices.Clone(cands[:i])
		for _, c := range cands[i+1:] {
			if keep(c) {
				out = append(out, c)
			}
		}
		return out
	}
	return cands
}

// Applies reports whether a policy runs on this kind of request: on a background
// request (Request.Background) only the policies that mutate existing objects; on a
// reconciled object (Request.Reconcile) every policy; at admission the policies not
// turned off at admission. It decides for mutators and validators alike.
func Applies(d *Descriptor, req *Request) bool {
	switch {
	case req.Background:
		return d.Background != nil && (req.Policy == nil || *req.Policy == d.ID)
	case req.Reconcile:
		return true
	}
	return !d.AdmissionOff
}

// addNotes adds a call's notes, with the policy's ID, once each.
func addNotes(notes []Note, id ID, add []Note) []Note {
	for _, n := range add {
		n.ID = id
		if !slices.Contains(notes, n) {
			notes = append(notes, n)
		}
	}
	return notes
}

// isRequestDeadline reports whether ctx ended (the request's deadline or its
// cancellation), as opposed to one policy's own timeout.
func isRequestDeadline(ctx context.Context) bool { return ctx.Err() != nil }

// invoke runs one call of a policy under its budgets: the policy's Timeout and the
// request's deadline (one timer, only when the policy's is nearer), and the run's write
// budget. A panic is an error, so that one broken policy never takes the request down;
// a result that arrives after the deadline is an error, never used.
func invoke(ctx context.Context, req *Request, m *Mutator, obj map[string]any, w *Writer) (next map[string]any, err error) {
	ctx, done := callContext(ctx, &m.Descriptor)
	defer done()
	defer func() {
		if r := recover(); r != nil {
			next, err = nil, fmt.Errorf("panic: %v", r)
		}
	}()
	w.startInvocation()
	next, err = m.Mutate(ctx, req, obj, w)
	if lateErr := late(ctx); lateErr != nil {
		return nil, lateErr
	}
	if err != nil {
		return nil, err
	}
	if err := w.overBudget(); err != nil {
		return nil, err
	}
	return next, nil
}

func (s *Set) finalize(ctx context.Context, req *Request, res *Result) error {
	w := &Writer{budget: req.WriteBudget}
	for _, f := range s.finalizers {
		w.reset()
		next, err := finalizeOne(ctx, req, f, res, w)
		res.Warnings = append(res.Warnings, w.warnings...)
		res.Notes = addNotes(res.Notes, ID{Kind: f.Name}, w.notes)
		if err != nil {
			return fmt.Errorf("%s: %w", f.Name, err)
		}
		if w.HasChanges() {
			res.Object = next
			res.Trace = append(res.Trace, Change{ID: ID{Kind: f.Name}, Pass: res.Passes + 1, Paths: append([]string(nil), w.paths...)})
		}
	}
	return nil
}

// finalizeOne runs one finalizer, turning a panic into an error (which fails the
// request, as a finalizer's error does) and checking the deadline and the write budget.
func finalizeOne(ctx context.Context, req *Request, f Finalizer, res *Result, w *Writer) (next map[string]any, err error) {
	defer func() {
		if r := recover(); r != nil {
			next, err = nil, fmt.Errorf("panic: %v", r)
		}
	}()
	next, err = f.Finalize(ctx, req, res.Object, res.Trace, w)
	if lateErr := late(ctx); lateErr != nil {
		return nil, lateErr
	}
	if err != nil {
		return nil, err
	}
	return next, w.overBudget()
}
