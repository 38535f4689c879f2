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
	w := s.writer(req.WriteBudget)
	defer s.release(w)
	cands := s.applicable(req)
	if len(cands) > 0 {
		if err := s.converge(ctx, req, cands, res, w); err != nil {
			return nil, err
		}
	}
	if len(s.finalizers) > 0 {
		if err := s.finalize(ctx, req, res, w); err != nil {
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
func (s *Set) converge(ctx context.Context, req *Request, cands []*compiled, res *Result, w *Writer) error {
	r := convergence{req: req, cands: cands, res: res, w: w}
	defer func() {
		for _, f := range res.Failures {
			res.Warnings = append(res.Warnings, fmt.Sprintf("%s skipped: %v", f.ID, f.Err))
		}
		res.Warnings = append(res.Warnings, r.warnings...)
	}()
restart:
	r.w.reset()
	obj := req.Object
	res.Trace = res.Trace[:0]
	res.Notes = res.Notes[:0]
	r.warnings = r.warnings[:0]
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
		passStart := obj
		if pass > 1 {
			r.w.disown()
		}
		next, failed, err := r.pass(ctx, pass, obj)
		if failed >= 0 {
			c := cands[failed]
			if c.FailurePolicy == FailClose || isRequestDeadline(ctx) {
				// Past the request's own deadline nothing may run any more, whatever
				// the policy's failure policy: the request fails.
				return &MutatorError{ID: c.ID, Err: err}
			}
			if r.skip == nil {
				r.skip = make([]bool, len(cands))
			}
			r.skip[failed] = true
			res.Failures = append(res.Failures, Failure{ID: c.ID, Err: err})
			goto restart
		}
		if err != nil {
			return err
		}
		obj = next
		res.Passes = pass
		changes := res.Trace[r.passTrace:]
		if len(changes) == 0 || passSettles(cands, r.changersSettle, changes, pass, passStart, obj) {
			res.Object = obj
			return nil
		}
		if pass == maxPasses {
			ids := make([]ID, len(changes))
			for j, c := range changes {
				ids[j] = c.ID
			}
			return &NotConvergedError{Passes: pass, Mutators: ids}
		}
	}
	res.Object = obj
	return nil
}

// convergence is the state of one request's run through its candidates.
type convergence struct {
	req   *Request
	cands []*compiled
	res   *Result
	w     *Writer
	// skip marks the candidates that failed under FailIgnore: the run starts again
	// without them.
	skip []bool
	// passTrace is where the current pass's changes start in res.Trace.
	passTrace int
	// changersSettle is whether every mutator that changed the current pass is
	// reinvoked until convergence (see passSettles).
	changersSettle bool
	// warnings are the mutators' own (Writer.Warn) of the current run; a restart
	// forgets them with the run, as it forgets res.Notes. Failure warnings come from
	// res.Failures.
	warnings []string
}

// pass runs the candidates of one pass on obj, in order, and returns the object after
// them. failed is the index in cands of the candidate whose call failed, with its error,
// or -1; err alone is an error of the run (ctx ended before the pass).
//
// A panic in a call is that call's error, so that one broken policy never takes the
// request down. The pass recovers once for all its calls, which keeps the engine's cost
// per candidate to a few comparisons: most candidates of a large set do not match.
func (r *convergence) pass(ctx context.Context, pass int, obj map[string]any) (out map[string]any, failed int, err error) {
	calling := -1
	defer func() {
		if calling < 0 {
			return
		}
		if p := recover(); p != nil {
			out, failed, err = nil, calling, fmt.Errorf("panic: %v", p)
		}
	}()
	r.passTrace, r.changersSettle = len(r.res.Trace), true
	if ctx.Err() != nil {
		// Only the pass's first call needs this check: invoke checks the context after
		// every call, and nothing else takes time between calls.
		for i, c := range r.cands {
			if runs(c.Reinvocation, pass) && (r.skip == nil || !r.skip[i]) {
				return nil, -1, fmt.Errorf("mutation stopped in pass %d before %s: %w", pass, c.ID, Stopped(ctx))
			}
		}
	}
	for i, c := range r.cands {
		if !runs(c.Reinvocation, pass) || (r.skip != nil && r.skip[i]) {
			continue
		}
		calling = i
		next, err := invoke(ctx, r.req, &c.Mutator, obj, r.w)
		calling = -1
		if err != nil {
			return nil, i, err
		}
		for _, text := range r.w.warnings {
			if !slices.Contains(r.warnings, text) {
				r.warnings = append(r.warnings, text)
			}
		}
		if len(r.w.notes) > 0 {
			r.res.Notes = addNotes(r.res.Notes, c.ID, r.w.notes)
		}
		if r.w.HasChanges() {
			obj = next
			r.res.Trace = append(r.res.Trace, Change{ID: c.ID, Pass: pass, Paths: slices.Clone(r.w.paths)})
			r.changersSettle = r.changersSettle && c.Reinvocation == ReinvokeIfNeeded
		}
	}
	return obj, -1, nil
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

// applicable returns, in order, the candidates that run on req (see Applies); an
// admission request's come from the candidate cache as they are.
func (s *Set) applicable(req *Request) []*compiled {
	list := s.lookup(req.Kind, req.Operation)
	if !req.Background && !req.Reconcile {
		return list.admission
	}
	return applicable(list.all, req)
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
// turned off at admission. It decides for mutators and validators alike. It reads only
// these three kinds of request, so the candidate cache keeps its admission answers
// (candidateList.admission).
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
// budget. A result that arrives after the deadline is an error, never used. The caller
// recovers a panic (see convergence.pass).
func invoke(ctx context.Context, req *Request, m *Mutator, obj map[string]any, w *Writer) (map[string]any, error) {
	if m.Timeout > 0 {
		var done context.CancelFunc
		ctx, done = callContext(ctx, &m.Descriptor)
		defer done()
	}
	w.startInvocation()
	next, err := m.Mutate(ctx, req, obj, w)
	if ctx.Err() != nil {
		return nil, late(ctx)
	}
	if err != nil {
		return nil, err
	}
	if err := w.overBudget(); err != nil {
		return nil, err
	}
	return next, nil
}

// finalize runs the finalizers on the converged object, each with w reset: its own
// budget, and no container owned.
func (s *Set) finalize(ctx context.Context, req *Request, res *Result, w *Writer) error {
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
