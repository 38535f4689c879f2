package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// funcMutator builds a Mutator from a function, for the budget tests.
func funcMutator(name string, d Descriptor, f MutateFunc) Mutator {
	d.ID = ID{Dialect: "test", Kind: "Func", Name: name}
	if d.Targets == nil {
		d.Targets = podTarget()
	}
	return Mutator{Descriptor: d, Mutate: f}
}

func podRequest() *Request { return &Request{Kind: podGVK, Operation: Create, Object: newPod()} }

// waitForDeadline blocks until ctx ends, as a well-behaved long evaluation does.
func waitForDeadline(ctx context.Context, _ *Request, obj map[string]any, _ *Writer) (map[string]any, error) {
	<-ctx.Done()
	return obj, ctx.Err()
}

func TestPolicyTimeoutNamesItsField(t *testing.T) {
	m := funcMutator("slow", Descriptor{Timeout: 20 * time.Millisecond, TimeoutField: "webhookConfiguration.timeoutSeconds", FailurePolicy: FailClose}, waitForDeadline)
	s, err := NewSet([]Mutator{m})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Mutate(context.Background(), podRequest())
	var te *TimeoutError
	if !errors.As(err, &te) || te.ID.Name != "slow" {
		t.Fatalf("error %v, want a TimeoutError of Func/slow", err)
	}
	if !strings.Contains(err.Error(), "webhookConfiguration.timeoutSeconds") {
		t.Fatalf("message %q does not name the field", err)
	}
}

func TestPolicyTimeoutIgnoredDropsOnlyThatPolicy(t *testing.T) {
	slow := funcMutator("a-slow", Descriptor{Timeout: 10 * time.Millisecond}, waitForDeadline)
	s, err := NewSet(append([]Mutator{slow}, asMutators(mut("b-good"))...))
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Mutate(context.Background(), podRequest())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Failures) != 1 || res.Failures[0].ID.Name != "a-slow" {
		t.Fatalf("failures %v", res.Failures)
	}
	if res.Object["spec"].(map[string]any)["b-good"] != "b-good" {
		t.Fatalf("the good policy's change is missing: %v", res.Object)
	}
}

// TestRequestDeadlineNamesItsReason: past the request's deadline even an Ignore policy
// fails the request, with the surface's words for the deadline.
func TestRequestDeadlineNamesItsReason(t *testing.T) {
	s, err := NewSet([]Mutator{funcMutator("slow", Descriptor{}, waitForDeadline)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := WithRequestDeadline(context.Background(), time.Now().Add(20*time.Millisecond), "the API server's ?timeout=1s")
	defer cancel()
	_, err = s.Mutate(ctx, podRequest())
	if err == nil || !strings.Contains(err.Error(), "?timeout=1s") || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error %v, want the request's deadline named", err)
	}
}

// TestLateResultIsNotUsed: a policy that ignores its context and returns a change after
// its deadline fails; its change is never used.
func TestLateResultIsNotUsed(t *testing.T) {
	late := funcMutator("late", Descriptor{Timeout: 5 * time.Millisecond}, func(ctx context.Context, _ *Request, obj map[string]any, w *Writer) (map[string]any, error) {
		<-ctx.Done()
		out := w.Map(obj)
		out["late"] = true
		w.Changed("/late")
		return out, nil
	})
	s, err := NewSet([]Mutator{late})
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Mutate(context.Background(), podRequest())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := res.Object["late"]; ok || len(res.Failures) != 1 {
		t.Fatalf("late change used: %v, failures %v", res.Object, res.Failures)
	}
}

func TestWriteBudget(t *testing.T) {
	grow := funcMutator("grow", Descriptor{FailurePolicy: FailClose}, func(_ context.Context, _ *Request, obj map[string]any, w *Writer) (map[string]any, error) {
		if _, done := obj["big"]; done {
			return obj, nil
		}
		out := w.Map(obj)
		big := strings.Repeat("x", 4096)
		_ = w.Charge(len(big)) // a careless mutator ignores the error: the engine still fails it
		out["big"] = big
		w.Changed("/big")
		return out, nil
	})
	s, err := NewSet([]Mutator{grow})
	if err != nil {
		t.Fatal(err)
	}
	req := podRequest()
	req.WriteBudget = 1024
	_, err = s.Mutate(context.Background(), req)
	var be *BudgetError
	if !errors.As(err, &be) || be.Budget != 1024 {
		t.Fatalf("error %v, want a BudgetError of 1024 bytes", err)
	}
	req = podRequest()
	res, err := s.Mutate(context.Background(), req) // the default budget holds 4 KiB
	if err != nil || res.Object["big"] == nil {
		t.Fatalf("default budget: %v", err)
	}
}

func TestWriterCopiesAreCharged(t *testing.T) {
	w := &Writer{budget: 100}
	big := make(map[string]any, 10)
	for i := range 10 {
		big[string(rune('a'+i))] = i
	}
	w.Map(big)
	if w.Remaining() != 0 || w.overBudget() == nil {
		t.Fatalf("copying 10 entries into a 100-byte budget left %d", w.Remaining())
	}
}

func TestNotesCarryThePolicyOnce(t *testing.T) {
	noting := funcMutator("noting", Descriptor{}, func(_ context.Context, _ *Request, obj map[string]any, w *Writer) (map[string]any, error) {
		w.Note(Note{Kind: NoteEvent, Reason: "DefaultsApplied", Message: "defaults applied: spec.replicas=1"})
		return obj, nil
	})
	s, err := NewSet(append([]Mutator{noting}, asMutators(mut("z"))...))
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Mutate(context.Background(), podRequest())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Notes) != 1 || res.Notes[0].ID.Name != "noting" || res.Notes[0].Kind != NoteEvent {
		t.Fatalf("notes %v (passes %d)", res.Notes, res.Passes)
	}
}

func TestFinalizerPanicIsAnError(t *testing.T) {
	s, err := NewSet(asMutators(mut("a")), Finalizer{Name: "broken", Finalize: func(context.Context, *Request, map[string]any, []Change, *Writer) (map[string]any, error) {
		panic("boom")
	}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Mutate(context.Background(), podRequest()); err == nil || !strings.Contains(err.Error(), "broken: panic: boom") {
		t.Fatalf("error %v", err)
	}
}

// TestBackgroundAndAdmission: a background request runs only the policies that mutate
// existing objects; an admission request runs the others not turned off at admission.
func TestBackgroundAndAdmission(t *testing.T) {
	set := func(name string) MutateFunc {
		return func(_ context.Context, _ *Request, obj map[string]any, w *Writer) (map[string]any, error) {
			if _, ok := obj[name]; ok {
				return obj, nil
			}
			out := w.Map(obj)
			out[name] = true
			w.Changed("/" + name)
			return out, nil
		}
	}
	s, err := NewSet([]Mutator{
		funcMutator("admission", Descriptor{}, set("admission")),
		funcMutator("existing", Descriptor{Background: &Background{}, AdmissionOff: true}, set("existing")),
		funcMutator("both", Descriptor{Background: &Background{}}, set("both")),
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		background bool
		want, not  []string
	}{
		{false, []string{"admission", "both"}, []string{"existing"}},
		{true, []string{"existing", "both"}, []string{"admission"}},
	} {
		req := podRequest()
		req.Background = tt.background
		res, err := s.Mutate(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range tt.want {
			if res.Object[k] != true {
				t.Errorf("background=%v: %s did not run", tt.background, k)
			}
		}
		for _, k := range tt.not {
			if _, ok := res.Object[k]; ok {
				t.Errorf("background=%v: %s ran", tt.background, k)
			}
		}
	}
}

// TestRecycledWritersKeepNothing: Mutate recycles its Writer. A request must start with
// nothing of an earlier one (warnings, notes, spent budget, owned containers), and
// concurrent requests must never share one (run with -race).
func TestRecycledWritersKeepNothing(t *testing.T) {
	tag := funcMutator("tag", Descriptor{}, func(_ context.Context, req *Request, obj map[string]any, w *Writer) (map[string]any, error) {
		if req.Name == "" {
			return obj, nil
		}
		w.Warn("tagged " + req.Name)
		w.Note(Note{Kind: NoteEvent, Message: req.Name})
		if err := w.Charge(700); err != nil {
			return nil, err
		}
		out := w.Map(obj)
		spec := w.Map(obj["spec"].(map[string]any))
		spec["tag"] = req.Name
		out["spec"] = spec
		w.Changed("/spec/tag")
		return out, nil
	})
	s, err := NewSet([]Mutator{tag})
	if err != nil {
		t.Fatal(err)
	}
	// Two requests of 700 bytes each under a budget of 1,000: each starts from zero.
	for range 2 {
		req := podRequest()
		req.Name, req.WriteBudget = "p", 1000
		if _, err := s.Mutate(context.Background(), req); err != nil {
			t.Fatalf("second request charged with the first's writes: %v", err)
		}
	}
	quiet := podRequest()
	res, err := s.Mutate(context.Background(), quiet)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Warnings) != 0 || len(res.Notes) != 0 || len(res.Trace) != 0 {
		t.Fatalf("a request that no policy changed carries an earlier one's warnings %v, notes %v, trace %v", res.Warnings, res.Notes, res.Trace)
	}

	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				req := podRequest()
				req.Name = fmt.Sprintf("g%d-%d", g, i)
				res, err := s.Mutate(context.Background(), req)
				if err != nil {
					errs <- err
					return
				}
				spec := res.Object["spec"].(map[string]any)
				if spec["tag"] != req.Name || len(res.Warnings) != 1 || res.Warnings[0] != "tagged "+req.Name || len(res.Notes) != 1 || res.Notes[0].Message != req.Name {
					errs <- fmt.Errorf("request %s got tag %v, warnings %v, notes %v", req.Name, spec["tag"], res.Warnings, res.Notes)
					return
				}
				if _, changed := req.Object["spec"].(map[string]any)["tag"]; changed {
					errs <- fmt.Errorf("request %s: its original object was written", req.Name)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
