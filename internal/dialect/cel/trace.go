package cel

import (
	"context"
	"sync"

	"github.com/morph-dev/morph/internal/engine"
)

// Exemption records that a PolicyException kept a policy from mutating an object.
type Exemption struct {
	Policy    engine.ID
	Exception string
	Namespace string
	// Object names the object: "Pod default/web".
	Object string
}

// SkippedMutation records a mutation that failed under failurePolicy Ignore while the
// policy's other mutations applied, as the API server does.
type SkippedMutation struct {
	Policy engine.ID
	Err    error
}

// Nondeterministic records that a policy evaluated on an object calls functions whose
// result changes from one call to the next (random, time.now): its output may differ
// from run to run.
type Nondeterministic struct {
	Policy    engine.ID
	Functions []string
}

// Rewritten records the expressions Kyverno's autogen rewrote to evaluate a Pod policy
// on a pod controller, as evaluated.
type Rewritten struct {
	Policy      engine.ID
	Kind        string
	Expressions []string
}

// Trace collects what the CEL dialect decided without changing the object, for
// `--explain`: exemptions by PolicyExceptions, ignored mutation errors, policies that
// call non-deterministic functions and the expressions autogen rewrote. It is safe for
// concurrent use.
type Trace struct {
	mu               sync.Mutex
	exemptions       []Exemption
	skipped          []SkippedMutation
	nondeterministic []Nondeterministic
	rewritten        []Rewritten
}

// Nondeterministic returns the policies recorded as calling random or time.now.
func (t *Trace) Nondeterministic() []Nondeterministic {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]Nondeterministic(nil), t.nondeterministic...)
}

// Rewritten returns the autogen rewrites recorded so far.
func (t *Trace) Rewritten() []Rewritten {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]Rewritten(nil), t.rewritten...)
}

func recordNondeterministic(ctx context.Context, id engine.ID, fns []string) {
	if t := traceOf(ctx); t != nil {
		t.mu.Lock()
		t.nondeterministic = append(t.nondeterministic, Nondeterministic{Policy: id, Functions: fns})
		t.mu.Unlock()
	}
}

func recordRewritten(ctx context.Context, r Rewritten) {
	if t := traceOf(ctx); t != nil {
		t.mu.Lock()
		t.rewritten = append(t.rewritten, r)
		t.mu.Unlock()
	}
}

// Exemptions returns the exemptions recorded so far, in order.
func (t *Trace) Exemptions() []Exemption {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]Exemption(nil), t.exemptions...)
}

// Skipped returns the ignored mutation errors recorded so far, in order.
func (t *Trace) Skipped() []SkippedMutation {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]SkippedMutation(nil), t.skipped...)
}

type traceKey struct{}

// WithTrace returns a context whose evaluations record into t.
func WithTrace(ctx context.Context, t *Trace) context.Context {
	return context.WithValue(ctx, traceKey{}, t)
}

func traceOf(ctx context.Context) *Trace { t, _ := ctx.Value(traceKey{}).(*Trace); return t }

func recordExemption(ctx context.Context, e Exemption) {
	if t := traceOf(ctx); t != nil {
		t.mu.Lock()
		t.exemptions = append(t.exemptions, e)
		t.mu.Unlock()
	}
}

func recordSkipped(ctx context.Context, id engine.ID, err error) {
	if t := traceOf(ctx); t != nil {
		t.mu.Lock()
		t.skipped = append(t.skipped, SkippedMutation{Policy: id, Err: err})
		t.mu.Unlock()
	}
}
