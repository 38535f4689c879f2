package katalog

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"reflect"
	"slices"
	"strings"
	"sync"
	"text/template"
	"unicode/utf8"
)

// Budget bounds one evaluation of a template: a default, override or conversion value.
// Go's text/template has no limit of its own: a range over a huge number, a string
// doubled through a variable or a list grown in a loop would run past any deadline
// and exhaust memory. Every evaluation is charged:
//
//   - Steps: one per range iteration, template call and function call (field
//     references excepted), plus the size of the lists and maps (one per element) and
//     strings (one per 64 bytes) a function is given, so that a step is a bounded
//     amount of work.
//   - Bytes: the template's output plus the size of every value a function returns
//     (strings by length, lists and maps by their elements, counted each time they
//     are referenced). Functions whose result can outgrow their arguments (printf,
//     repeat, replace, join, ...) are refused before they run when the result would not
//     fit.
//
// An evaluation that exceeds either fails with an error naming the budget; the
// context given to the evaluation cancels it too. A zero field means the default.
type Budget struct {
	Steps int64
	Bytes int64
}

// Default budget of one evaluation: far above what a template that reads an object
// and formats a few fields needs, low enough that a hostile template fails in well
// under a second and a few tens of MiB.
const (
	DefaultSteps int64 = 100_000
	DefaultBytes int64 = 16 << 20
)

// withDefaults fills zero fields.
func (b Budget) withDefaults() Budget {
	if b.Steps <= 0 {
		b.Steps = DefaultSteps
	}
	if b.Bytes <= 0 {
		b.Bytes = DefaultBytes
	}
	return b
}

// BudgetError is returned when an evaluation exceeds its budget.
type BudgetError struct {
	// Resource is "steps" or "bytes".
	Resource string
	Limit    int64
}

func (e *BudgetError) Error() string {
	return fmt.Sprintf("the template exceeded its budget of %d %s (Katalog templates are bounded; see katalog.Budget)", e.Limit, e.Resource)
}

// execState is the budget account of one evaluation.
type execState struct {
	ctx   context.Context
	limit Budget
	steps int64
	bytes int64
}

func (s *execState) reset(ctx context.Context, b Budget) {
	s.ctx, s.limit, s.steps, s.bytes = ctx, b, 0, 0
}

// fail aborts the evaluation from inside text/template: a panic of an ExecError is
// returned by Execute as is (and a panic in a called function as that call's error).
func fail(err error) {
	panic(template.ExecError{Name: "budget", Err: err})
}

// step charges n steps and checks the context every so often.
func (s *execState) step(n int64) {
	before := s.steps
	s.steps += n
	if s.steps > s.limit.Steps {
		fail(&BudgetError{Resource: "steps", Limit: s.limit.Steps})
	}
	if s.ctx != nil && (before>>8 != s.steps>>8) {
		if err := s.ctx.Err(); err != nil {
			fail(fmt.Errorf("template evaluation stopped: %w", context.Cause(s.ctx)))
		}
	}
}

// remaining is the number of bytes still available.
func (s *execState) remaining() int64 { return s.limit.Bytes - s.bytes }

// charge counts n bytes.
func (s *execState) charge(n int64) {
	s.bytes += n
	if s.bytes > s.limit.Bytes {
		fail(&BudgetError{Resource: "bytes", Limit: s.limit.Bytes})
	}
}

// room refuses a result of n bytes before it is built.
func (s *execState) room(n int64) {
	if n > s.remaining() {
		fail(&BudgetError{Resource: "bytes", Limit: s.limit.Bytes})
	}
}

// sizeOf is the logical size of a value: what printing or copying it costs. Shared
// parts count every time they are referenced (a list holding one list twice counts it
// twice), so the walk stops as soon as the size passes limit and returns limit+1.
func sizeOf(v any, limit int64) int64 {
	var n int64
	var walk func(v any) bool
	walk = func(v any) bool {
		switch x := v.(type) {
		case string:
			n += int64(len(x)) + 16
		case []any:
			n += 24
			for _, e := range x {
				if n > limit || !walk(e) {
					return false
				}
			}
		case map[string]any:
			n += 48
			for k, e := range x {
				n += int64(len(k)) + 16
				if n > limit || !walk(e) {
					return false
				}
			}
		case []string:
			n += 24
			for _, e := range x {
				n += int64(len(e)) + 16
			}
		default:
			n += 8
		}
		return n <= limit
	}
	walk(v)
	if n > limit {
		return limit + 1
	}
	return n
}

// workOf is the step cost of handling a value: one per element of a list or map at
// its top level, one per 64 bytes of a string.
func workOf(v any) int64 {
	switch x := v.(type) {
	case string:
		return int64(len(x) / 64)
	case []any:
		return int64(len(x))
	case map[string]any:
		return int64(len(x))
	case []string:
		return int64(len(x))
	}
	return 0
}

// noCharge are the functions whose result is one of their arguments or a part of one,
// or a small scalar: they cost steps but no bytes.
var noCharge = map[string]bool{
	fnField: true, "default": true, "empty": true, "coalesce": true, "ternary": true,
	"first": true, "last": true, "get": true, "hasKey": true, "has": true,
	"contains": true, "hasPrefix": true, "hasSuffix": true, "len": true, "index": true,
	"slice": true, fnStep: true,
}

// bounded returns the library with every function charged to s: a step per call plus
// the work of its arguments, the size of its result, and for the functions whose
// result can outgrow their arguments a check before they run.
func (s *execState) bounded(lib template.FuncMap) template.FuncMap {
	out := make(template.FuncMap, len(lib)+8)
	for name, fn := range lib {
		if name == fnField {
			// Every field reference calls it: it allocates nothing and does work
			// bounded by the reference's length, and the ranges that repeat it are
			// charged, so it runs unwrapped.
			out[name] = fn
			continue
		}
		out[name] = s.wrap(name, fn)
	}
	// text/template's printing and escaping built-ins, bounded the same way.
	for name, fn := range map[string]any{
		"print": fmt.Sprint, "printf": fmt.Sprintf, "println": fmt.Sprintln,
		"html": template.HTMLEscaper, "js": template.JSEscaper, "urlquery": template.URLQueryEscaper,
	} {
		out[name] = s.wrap(name, fn)
	}
	out[fnRange] = s.rangeOver
	out[fnStep] = func(v any) any { s.step(1); return v }
	return out
}

func (s *execState) wrap(name string, fn any) any {
	fv := reflect.ValueOf(fn)
	ft := fv.Type()
	charge := !noCharge[name]
	return reflect.MakeFunc(ft, func(args []reflect.Value) []reflect.Value {
		vals := make([]any, 0, len(args))
		for i, a := range args {
			if ft.IsVariadic() && i == len(args)-1 {
				for j := range a.Len() {
					vals = append(vals, a.Index(j).Interface())
				}
				continue
			}
			vals = append(vals, a.Interface())
		}
		work := int64(1)
		for _, v := range vals {
			work += workOf(v)
		}
		s.step(work)
		if charge {
			s.room(s.resultBound(name, vals))
		}
		var res []reflect.Value
		if ft.IsVariadic() {
			res = fv.CallSlice(args)
		} else {
			res = fv.Call(args)
		}
		if charge && len(res) > 0 {
			s.charge(sizeOf(res[0].Interface(), s.remaining()))
		}
		return res
	}).Interface()
}

// resultBound is an upper bound of the size of the result of the functions whose
// result can be much larger than their arguments, 0 for the others (whose result is
// charged after the call).
func (s *execState) resultBound(name string, args []any) int64 {
	limit := s.remaining()
	switch name {
	case "repeat":
		if len(args) == 2 {
			n, ok := args[0].(int)
			if ok && n > 0 {
				l := int64(len(printed(args[1])))
				if l > 0 && int64(n) > limit/l {
					return limit + 1
				}
				return int64(n) * l
			}
		}
	case "replace":
		if len(args) == 3 {
			old, nw, str := printed(args[0]), printed(args[1]), printed(args[2])
			var n int64
			if old == "" {
				n = int64(utf8.RuneCountInString(str)) + 1
			} else {
				n = int64(strings.Count(str, old))
			}
			grow := int64(len(nw)) - int64(len(old))
			if grow > 0 && n > 0 && n > limit/grow {
				return limit + 1
			}
			return int64(len(str)) + max(0, n*grow)
		}
	case "join":
		if len(args) == 2 {
			n := sizeOf(args[1], limit)
			sep := int64(len(printed(args[0])))
			if l, ok := args[1].([]any); ok && sep > 0 && int64(len(l)) > limit/sep {
				return limit + 1
			}
			if l, ok := args[1].([]any); ok {
				n += int64(len(l)) * sep
			}
			return n
		}
	case "printf":
		if len(args) > 0 {
			format, _ := args[0].(string)
			var widest int64
			for _, a := range args[1:] {
				widest = max(widest, 2*sizeOf(a, limit))
			}
			verbs := int64(strings.Count(format, "%"))
			if verbs > 0 && widest > limit/verbs {
				return limit + 1
			}
			return int64(len(format)) + verbs*widest + numbersIn(format)
		}
	case "print", "println":
		var n int64
		for _, a := range args {
			n += 2*sizeOf(a, limit) + 1
		}
		return n
	}
	return 0
}

// numbersIn sums the numbers written in a format (widths and precisions), each capped
// at fmt's own limit of a million.
func numbersIn(format string) int64 {
	var total, cur int64
	for i := 0; i <= len(format); i++ {
		if i < len(format) && format[i] >= '0' && format[i] <= '9' {
			cur = min(cur*10+int64(format[i]-'0'), 1e6)
			continue
		}
		total += cur
		cur = 0
	}
	return total
}

// rangeOver is inserted at the end of every range pipeline: it iterates like
// text/template's range (elements of a list, values of a map in key order, 0..n-1 of an
// integer) and charges a step per iteration. With two variables it yields index or key
// and element.
func (s *execState) rangeOver(vars int, v any) (any, error) {
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if vars > 1 {
			return nil, fmt.Errorf("can't use %v to iterate over more than one variable", v)
		}
		return iter.Seq[any](func(yield func(any) bool) {
			for i := range rv.Int() {
				s.step(1)
				if !yield(reflect.ValueOf(i).Convert(rv.Type()).Interface()) {
					return
				}
			}
		}), nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		if vars > 1 {
			return nil, fmt.Errorf("can't use %v to iterate over more than one variable", v)
		}
		return iter.Seq[any](func(yield func(any) bool) {
			for i := range rv.Uint() {
				s.step(1)
				if !yield(reflect.ValueOf(i).Convert(rv.Type()).Interface()) {
					return
				}
			}
		}), nil
	case reflect.Slice, reflect.Array:
		return s.pairs(vars, rv.Len(), func(i int) (any, any) { return i, rv.Index(i).Interface() }), nil
	case reflect.Map:
		if rv.Type().Key().Kind() != reflect.String {
			return v, nil
		}
		keys := make([]string, 0, rv.Len())
		for _, k := range rv.MapKeys() {
			keys = append(keys, k.String())
		}
		slices.Sort(keys)
		s.step(int64(len(keys)))
		return s.pairs(vars, len(keys), func(i int) (any, any) {
			return keys[i], rv.MapIndex(reflect.ValueOf(keys[i]).Convert(rv.Type().Key())).Interface()
		}), nil
	}
	// Anything else (nil, an iterator of text/template's own kinds) is ranged over by
	// text/template as it is, which reports what it cannot range over.
	return v, nil
}

func (s *execState) pairs(vars, n int, at func(int) (any, any)) any {
	if vars > 1 {
		return iter.Seq2[any, any](func(yield func(any, any) bool) {
			for i := range n {
				s.step(1)
				if !yield(at(i)) {
					return
				}
			}
		})
	}
	return iter.Seq[any](func(yield func(any) bool) {
		for i := range n {
			s.step(1)
			if _, e := at(i); !yield(e) {
				return
			}
		}
	})
}

// limitedWriter is the template's output, bounded by the byte budget.
type limitedWriter struct {
	buf []byte
	s   *execState
}

func (w *limitedWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > w.s.remaining() {
		return 0, &BudgetError{Resource: "bytes", Limit: w.s.limit.Bytes}
	}
	w.s.bytes += int64(len(p))
	w.buf = append(w.buf, p...)
	return len(p), nil
}

// boundTemplate is a copy of a compiled template whose functions are charged to its
// own account; a Value keeps a pool of them so that evaluations run in parallel
// without sharing an account.
type boundTemplate struct {
	tmpl  *template.Template
	state *execState
}

type templatePool struct {
	base *template.Template
	lib  template.FuncMap
	pool sync.Pool
}

func (p *templatePool) get() (*boundTemplate, error) {
	if b, ok := p.pool.Get().(*boundTemplate); ok {
		return b, nil
	}
	t, err := p.base.Clone()
	if err != nil {
		return nil, err
	}
	st := &execState{}
	t.Funcs(st.bounded(p.lib))
	return &boundTemplate{tmpl: t, state: st}, nil
}

func (p *templatePool) put(b *boundTemplate) {
	b.state.ctx = nil
	p.pool.Put(b)
}

// execute runs the template on obj under the budget and returns its output.
func (p *templatePool) execute(ctx context.Context, obj map[string]any, budget Budget) ([]byte, error) {
	b, err := p.get()
	if err != nil {
		return nil, err
	}
	defer p.put(b)
	b.state.reset(ctx, budget.withDefaults())
	w := &limitedWriter{s: b.state}
	if err := b.tmpl.Execute(w, obj); err != nil {
		return nil, err
	}
	return w.buf, nil
}

// budgetCause finds a budget or cancellation error in an execution error.
func budgetCause(err error) error {
	var be *BudgetError
	if errors.As(err, &be) {
		return be
	}
	var exec template.ExecError
	if errors.As(err, &exec) && exec.Name == "budget" {
		return exec.Err
	}
	return nil
}
