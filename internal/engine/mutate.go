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
	cands := s.candidates(req.Kind, req.Operation)
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
	w := &Writer{}
	// changedBy are the indices in cands of the mutators that changed the current pass.
	var changedBy []int
	// warnings are the mutators' own (Writer.Warn) of the current run; a restart
	// forgets them with the run. Failure warnings come from res.Failures.
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
	warnings = warnings[:0]
	maxPasses := len(cands) + 1
	if slices.ContainsFunc(cands, func(c *compiled) bool { return c.reinvoke == ReinvokeOnce }) {
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
			if !runs(c.reinvoke, pass) || (skip != nil && skip[i]) {
				continue
			}
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("mutation stopped in pass %d before %s: %w", pass, c.id, err)
			}
			next, err := s.invoke(ctx, req, c, obj, w)
			if err != nil {
				if c.failure == FailClose {
					return &MutatorError{ID: c.id, Err: err}
				}
				if skip == nil {
					skip = make([]bool, len(cands))
				}
				skip[i] = true
				res.Failures = append(res.Failures, Failure{ID: c.id, Err: err})
				goto restart
			}
			for _, text := range w.warnings {
				if !slices.Contains(warnings, text) {
					warnings = append(warnings, text)
				}
			}
			if w.HasChanges() {
				obj = next
				res.Trace = append(res.Trace, Change{ID: c.id, Pass: pass, Paths: slices.Clone(w.paths)})
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
				ids[j] = cands[i].id
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
	return slices.ContainsFunc(cands, func(c *compiled) bool { return runs(c.reinvoke, pass) })
}

// invoke runs one mutator, turning a panic into an error so that one broken policy never
// takes the request down.
func (s *Set) invoke(ctx context.Context, req *Request, c *compiled, obj map[string]any, w *Writer) (next map[string]any, err error) {
	defer func() {
		if r := recover(); r != nil {
			next, err = nil, fmt.Errorf("panic: %v", r)
		}
	}()
	w.startInvocation()
	ok, err := c.m.Matches(ctx, req, obj)
	if err != nil {
		return nil, fmt.Errorf("match: %w", err)
	}
	if !ok {
		return obj, nil
	}
	return c.m.Mutate(ctx, req, obj, w)
}

func (s *Set) finalize(ctx context.Context, req *Request, res *Result) error {
	w := &Writer{}
	for _, f := range s.finalizers {
		w.reset()
		next, warnings, err := f.Finalize(ctx, req, res.Object, res.Trace, w)
		res.Warnings = append(append(res.Warnings, warnings...), w.warnings...)
		if err != nil {
			return fmt.Errorf("%s: %w", f.Name(), err)
		}
		if w.HasChanges() {
			res.Object = next
			res.Trace = append(res.Trace, Change{ID: ID{Kind: f.Name()}, Pass: res.Passes + 1, Paths: append([]string(nil), w.paths...)})
		}
	}
	return nil
}
