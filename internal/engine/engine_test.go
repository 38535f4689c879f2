package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

var podGVK = schema.GroupVersionKind{Version: "v1", Kind: "Pod"}

// setField is a test mutator that sets a top-level key of spec, optionally copying the
// value of another key, so tests can build chains and cycles.
type setField struct {
	id        ID
	targets   []Target
	key       string
	value     any
	copyFrom  string // if set, value is spec[copyFrom]+"!" when present
	fail      error
	panics    bool
	reinvoke  Reinvocation
	failure   FailurePolicy
	noMatch   bool
	calls     *int
	increment bool // spec[key] = spec[key]+1: never converges
}

func (m *setField) ID() ID                       { return m.id }
func (m *setField) Targets() []Target            { return m.targets }
func (m *setField) Reinvocation() Reinvocation   { return m.reinvoke }
func (m *setField) FailurePolicy() FailurePolicy { return m.failure }
func (m *setField) Matches(context.Context, *Request, map[string]any) (bool, error) {
	return !m.noMatch, nil
}

func (m *setField) Mutate(_ context.Context, _ *Request, obj map[string]any, w *Writer) (map[string]any, error) {
	if m.calls != nil {
		*m.calls++
	}
	if m.panics {
		panic("boom")
	}
	if m.fail != nil {
		return nil, m.fail
	}
	spec, _ := obj["spec"].(map[string]any)
	want := m.value
	if m.copyFrom != "" {
		src, ok := spec[m.copyFrom].(string)
		if !ok {
			return obj, nil
		}
		want = src + "!"
	}
	if m.increment {
		n, _ := spec[m.key].(int64)
		want = n + 1
	}
	if cur, ok := spec[m.key]; ok && Equal(cur, want) {
		return obj, nil
	}
	root := w.Map(obj)
	s := w.Map(spec)
	s[m.key] = want
	root["spec"] = s
	w.Changed(Pointer("spec", m.key))
	return root, nil
}

func podTarget() []Target {
	return []Target{{Version: "v1", Kind: "Pod", Operations: opCreate | opUpdate}}
}

func mut(name string, opts ...func(*setField)) *setField {
	m := &setField{id: ID{Dialect: "test", Kind: "Set", Name: name}, targets: podTarget(), key: name, value: name}
	for _, o := range opts {
		o(m)
	}
	return m
}

func newPod() map[string]any {
	return map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": map[string]any{"name": "p"}, "spec": map[string]any{"a": "x"}}
}

// testMutator is the method set of the test mutators; asMutator makes it a Mutator.
type testMutator interface {
	ID() ID
	Targets() []Target
	Reinvocation() Reinvocation
	FailurePolicy() FailurePolicy
	Matches(context.Context, *Request, map[string]any) (bool, error)
	Mutate(context.Context, *Request, map[string]any, *Writer) (map[string]any, error)
}

func asMutator(m testMutator) Mutator {
	return Mutator{
		Descriptor: Descriptor{ID: m.ID(), Targets: m.Targets(), Reinvocation: m.Reinvocation(), FailurePolicy: m.FailurePolicy()},
		Mutate: func(ctx context.Context, req *Request, obj map[string]any, w *Writer) (map[string]any, error) {
			ok, err := m.Matches(ctx, req, obj)
			if err != nil || !ok {
				return obj, err
			}
			return m.Mutate(ctx, req, obj, w)
		},
	}
}

func asMutators(ms ...testMutator) []Mutator {
	out := make([]Mutator, len(ms))
	for i, m := range ms {
		out[i] = asMutator(m)
	}
	return out
}

func mustSet(t *testing.T, ms ...testMutator) *Set {
	t.Helper()
	s, err := NewSet(asMutators(ms...))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestMutateDoesNotModifyInput(t *testing.T) {
	pod := newPod()
	before := DeepCopyMap(pod)
	s := mustSet(t, mut("b"), mut("c"))
	res, err := s.Mutate(context.Background(), &Request{Kind: podGVK, Operation: Create, Object: pod})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(pod, before) {
		t.Fatalf("input modified: %v", pod)
	}
	if got := res.Object["spec"].(map[string]any); got["b"] != "b" || got["c"] != "c" || got["a"] != "x" {
		t.Fatalf("unexpected result %v", got)
	}
	if res.Passes != 2 {
		t.Fatalf("passes = %d, want 2 (one that changes, one that confirms)", res.Passes)
	}
}

func TestOrderIsTotalAndDocumented(t *testing.T) {
	ids := []ID{
		{Dialect: "katalog", Kind: "Katalog", Name: "a"},
		{Dialect: "gatekeeper", Kind: "ModifySet", Name: "a"},
		{Dialect: "gatekeeper", Kind: "Assign", Name: "b"},
		{Dialect: "gatekeeper", Kind: "Assign", Name: "a"},
		{Dialect: "cel", Kind: "MutatingPolicy", Name: "z"},
		{Order: -1, Dialect: "katalog", Kind: "Katalog", Name: "first"},
		{Dialect: "gatekeeper", Kind: "AssignImage", Name: "a"},
		{Dialect: "gatekeeper", Kind: "AssignMetadata", Name: "a"},
	}
	var ms []testMutator
	for _, id := range ids {
		ms = append(ms, &setField{id: id, targets: podTarget(), key: id.Name, value: "v"})
	}
	s := mustSet(t, ms...)
	var got []string
	for _, id := range s.Candidates(podGVK, Create) {
		got = append(got, id.String())
	}
	want := "Katalog/first MutatingPolicy/z Assign/a Assign/b AssignImage/a AssignMetadata/a ModifySet/a Katalog/a"
	if strings.Join(got, " ") != want {
		t.Fatalf("order:\n got %s\nwant %s", strings.Join(got, " "), want)
	}
}

func TestDuplicateIDsRejected(t *testing.T) {
	if _, err := NewSet(asMutators(mut("a"), mut("a"))); err == nil || !strings.Contains(err.Error(), "Set/a") {
		t.Fatalf("want duplicate error naming Set/a, got %v", err)
	}
}

func TestIndexAndOperations(t *testing.T) {
	deploy := schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}
	createOnly := mut("create-only", func(m *setField) {
		m.targets = []Target{{Version: "v1", Kind: "Pod", Operations: opCreate}}
	})
	anyKind := mut("any", func(m *setField) {
		m.targets = []Target{{Group: "*", Version: "*", Kind: "*", Operations: AllOperations}}
	})
	onDeploy := mut("deploy", func(m *setField) {
		m.targets = []Target{{Group: "apps", Version: "v1", Kind: "Deployment", Operations: opCreate}}
	})
	s := mustSet(t, createOnly, anyKind, onDeploy)
	tests := []struct {
		gvk  schema.GroupVersionKind
		op   Operation
		want string
	}{
		{podGVK, Create, "Set/any Set/create-only"},
		{podGVK, Update, "Set/any"},
		{deploy, Create, "Set/any Set/deploy"},
		{schema.GroupVersionKind{Version: "v1", Kind: "Service"}, Delete, "Set/any"},
	}
	for _, tt := range tests {
		var got []string
		for _, id := range s.Candidates(tt.gvk, tt.op) {
			got = append(got, id.String())
		}
		if strings.Join(got, " ") != tt.want {
			t.Errorf("%v %s: got %v, want %s", tt.gvk, tt.op, got, tt.want)
		}
	}
}

func TestNoCandidatesCostsNothing(t *testing.T) {
	s := mustSet(t, mut("a"))
	pod := newPod()
	res, err := s.Mutate(context.Background(), &Request{Kind: schema.GroupVersionKind{Version: "v1", Kind: "Service"}, Operation: Create, Object: pod})
	if err != nil {
		t.Fatal(err)
	}
	if res.Passes != 0 || res.Changed() {
		t.Fatalf("want no passes, no change; got %d passes, patch %v", res.Passes, res.Patch)
	}
}

func TestConvergenceReachesLaterChanges(t *testing.T) {
	// "a-follow" sorts before "z-source" but depends on it: it needs a second pass.
	follow := mut("a-follow", func(m *setField) { m.copyFrom = "z-source" })
	source := mut("z-source")
	s := mustSet(t, follow, source)
	res, err := s.Mutate(context.Background(), &Request{Kind: podGVK, Operation: Create, Object: newPod()})
	if err != nil {
		t.Fatal(err)
	}
	spec := res.Object["spec"].(map[string]any)
	if spec["a-follow"] != "z-source!" {
		t.Fatalf("follow not reinvoked: %v", spec)
	}
	if res.Passes != 3 {
		t.Fatalf("passes = %d, want 3", res.Passes)
	}
	want := []Change{
		{ID: source.id, Pass: 1, Paths: []string{"/spec/z-source"}},
		{ID: follow.id, Pass: 2, Paths: []string{"/spec/a-follow"}},
	}
	if !reflect.DeepEqual(res.Trace, want) {
		t.Fatalf("trace = %+v\nwant %+v", res.Trace, want)
	}
}

func TestReinvokeNeverRunsOnce(t *testing.T) {
	follow := mut("a-follow", func(m *setField) { m.copyFrom = "z-source"; m.reinvoke = ReinvokeNever })
	s := mustSet(t, follow, mut("z-source"))
	res, err := s.Mutate(context.Background(), &Request{Kind: podGVK, Operation: Create, Object: newPod()})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := res.Object["spec"].(map[string]any)["a-follow"]; ok {
		t.Fatal("a ReinvokeNever mutator ran in a later pass")
	}
}

func TestNotConverged(t *testing.T) {
	s := mustSet(t, mut("counter", func(m *setField) { m.increment = true }), mut("steady"))
	_, err := s.Mutate(context.Background(), &Request{Kind: podGVK, Operation: Create, Object: newPod()})
	var nc *NotConvergedError
	if !errors.As(err, &nc) {
		t.Fatalf("want NotConvergedError, got %v", err)
	}
	if nc.Passes != 3 || len(nc.Mutators) != 1 || nc.Mutators[0].Name != "counter" {
		t.Fatalf("got %+v", nc)
	}
	if !strings.Contains(err.Error(), "Set/counter") {
		t.Fatalf("error does not name the mutator: %v", err)
	}
}

func TestFailureIsolation(t *testing.T) {
	tests := []struct {
		name    string
		bad     *setField
		wantErr bool
	}{
		{"error ignored", mut("b-bad", func(m *setField) { m.fail = errors.New("no value") }), false},
		{"panic ignored", mut("b-bad", func(m *setField) { m.panics = true }), false},
		{"error fails request", mut("b-bad", func(m *setField) { m.fail = errors.New("no value"); m.failure = FailClose }), true},
		{"panic fails request", mut("b-bad", func(m *setField) { m.panics = true; m.failure = FailClose }), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := mustSet(t, mut("a-good"), tt.bad, mut("c-good"))
			res, err := s.Mutate(context.Background(), &Request{Kind: podGVK, Operation: Create, Object: newPod()})
			if tt.wantErr {
				var me *MutatorError
				if !errors.As(err, &me) || me.ID.Name != "b-bad" {
					t.Fatalf("want MutatorError for b-bad, got %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			spec := res.Object["spec"].(map[string]any)
			if spec["a-good"] != "a-good" || spec["c-good"] != "c-good" {
				t.Fatalf("good mutators lost: %v", spec)
			}
			if len(res.Failures) != 1 || res.Failures[0].ID.Name != "b-bad" || len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], "Set/b-bad") {
				t.Fatalf("failures %v warnings %v", res.Failures, res.Warnings)
			}
		})
	}
}

// A mutator that changes the object in pass 1 and fails in pass 2 must leave no trace:
// its pass-1 change is dropped too.
func TestFailedMutatorChangesDroppedAsAWhole(t *testing.T) {
	calls := 0
	flaky := &flakyMutator{setField: mut("a-flaky", func(m *setField) { m.calls = &calls })}
	s := mustSet(t, flaky, mut("z-other"))
	res, err := s.Mutate(context.Background(), &Request{Kind: podGVK, Operation: Create, Object: newPod()})
	if err != nil {
		t.Fatal(err)
	}
	spec := res.Object["spec"].(map[string]any)
	if _, ok := spec["a-flaky"]; ok {
		t.Fatalf("failed mutator's earlier change kept: %v", spec)
	}
	if spec["z-other"] != "z-other" {
		t.Fatalf("other mutator lost: %v", spec)
	}
	for _, c := range res.Trace {
		if c.ID.Name == "a-flaky" {
			t.Fatalf("trace still names the failed mutator: %+v", res.Trace)
		}
	}
}

type flakyMutator struct{ *setField }

func (f *flakyMutator) Mutate(ctx context.Context, req *Request, obj map[string]any, w *Writer) (map[string]any, error) {
	if *f.calls >= 1 {
		*f.calls++
		return nil, fmt.Errorf("second call fails")
	}
	return f.setField.Mutate(ctx, req, obj, w)
}

func TestContextCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	s := mustSet(t, mut("a"), mut("b"))
	_, err := s.Mutate(ctx, &Request{Kind: podGVK, Operation: Create, Object: newPod()})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("want context.Canceled, got %v", err)
	}
	// The pass checks the context once, before its first call, and names that call.
	if want := "mutation stopped in pass 1 before " + s.all[0].ID.String(); !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("error %q, want it to start with %q", err, want)
	}
}

func TestDeterministicPatch(t *testing.T) {
	var first string
	for i := 0; i < 20; i++ {
		s := mustSet(t, mut("c"), mut("b"), mut("d"), mut("a/x~y"))
		res, err := s.Mutate(context.Background(), &Request{Kind: podGVK, Operation: Create, Object: newPod()})
		if err != nil {
			t.Fatal(err)
		}
		b, _ := res.Patch.JSON()
		if i == 0 {
			first = string(b)
			if !strings.Contains(first, `"/spec/a~1x~0y"`) {
				t.Fatalf("pointer not escaped: %s", first)
			}
			continue
		}
		if string(b) != first {
			t.Fatalf("patch differs between runs:\n%s\n%s", first, b)
		}
	}
}

type recordingFinalizer struct{}

func (recordingFinalizer) Finalize(_ context.Context, _ *Request, obj map[string]any, _ []Change, w *Writer) (map[string]any, error) {
	root := w.Map(obj)
	root["done"] = true
	w.Changed("/done")
	w.Warn("finalized")
	return root, nil
}

func TestFinalizerRunsAfterConvergence(t *testing.T) {
	s, err := NewSet(asMutators(mut("a")), Finalizer{Name: "finalizer", Finalize: recordingFinalizer{}.Finalize})
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Mutate(context.Background(), &Request{Kind: podGVK, Operation: Create, Object: newPod()})
	if err != nil {
		t.Fatal(err)
	}
	if res.Object["done"] != true || len(res.Warnings) != 1 || res.Trace[len(res.Trace)-1].ID.Kind != "finalizer" {
		t.Fatalf("finalizer result: %+v", res)
	}
}

// warner warns in every pass and changes nothing; with a failing mutator after it, the
// warning must survive the restart once, next to the failure's.
type warner struct{ *setField }

func (m *warner) Mutate(_ context.Context, _ *Request, obj map[string]any, w *Writer) (map[string]any, error) {
	w.Warn("part of policy skipped")
	return obj, nil
}

func TestWarningsOncePerRun(t *testing.T) {
	s := mustSet(t, &warner{mut("a-warn")}, mut("b-bad", func(m *setField) { m.fail = errors.New("no value") }), mut("c-good"))
	res, err := s.Mutate(context.Background(), &Request{Kind: podGVK, Operation: Create, Object: newPod()})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"Set/b-bad skipped: no value", "part of policy skipped"}
	if !reflect.DeepEqual(res.Warnings, want) {
		t.Fatalf("warnings %q, want %q", res.Warnings, want)
	}
}

// appender appends "a" to spec.runs every time it runs: it never converges, like a
// MutatingAdmissionPolicy that is not idempotent.
type appender struct{ *setField }

func (m *appender) Mutate(_ context.Context, _ *Request, obj map[string]any, w *Writer) (map[string]any, error) {
	spec, _ := obj["spec"].(map[string]any)
	runs, _ := spec["runs"].(string)
	root, s := w.Map(obj), w.Map(spec)
	s["runs"] = runs + "a"
	root["spec"] = s
	w.Changed("/spec/runs")
	return root, nil
}

// TestReinvokeOnce follows the API server: a policy with reinvocationPolicy IfNeeded is
// reinvoked at most once, so a self-changing policy runs twice and is not an error; a
// ReinvokeIfNeeded mutator after it still sees its second change.
func TestReinvokeOnce(t *testing.T) {
	once := &appender{mut("a-runs", func(m *setField) { m.reinvoke = ReinvokeOnce })}
	follow := mut("b-follow", func(m *setField) { m.copyFrom = "runs"; m.key = "follow" })
	s := mustSet(t, once, follow)
	res, err := s.Mutate(context.Background(), &Request{Kind: podGVK, Operation: Create, Object: newPod()})
	if err != nil {
		t.Fatal(err)
	}
	spec := res.Object["spec"].(map[string]any)
	if spec["runs"] != "aa" || spec["follow"] != "aa!" {
		t.Fatalf("spec = %v, want runs aa and follow aa!", spec)
	}
	if res.Passes != 3 {
		t.Fatalf("passes = %d, want 3", res.Passes)
	}
	// The same mutator reinvoked until convergence never converges.
	loop := &appender{mut("a-runs")}
	if _, err := mustSet(t, loop).Mutate(context.Background(), &Request{Kind: podGVK, Operation: Create, Object: newPod()}); err == nil {
		t.Fatal("a ReinvokeIfNeeded mutator that always changes must not converge")
	}
}

type warningFinalizer struct{}

func (warningFinalizer) Finalize(_ context.Context, _ *Request, obj map[string]any, _ []Change, w *Writer) (map[string]any, error) {
	w.Warn("provider slow")
	w.Warn("returned")
	return obj, nil
}

func TestFinalizerWarningsThroughTheWriter(t *testing.T) {
	s, err := NewSet(asMutators(mut("a")), Finalizer{Name: "warner", Finalize: warningFinalizer{}.Finalize})
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Mutate(context.Background(), &Request{Kind: podGVK, Operation: Create, Object: newPod()})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(res.Warnings, []string{"provider slow", "returned"}) {
		t.Fatalf("warnings %q", res.Warnings)
	}
}

// TestCandidateCacheCountsKeys: the cache bound counts distinct keys, so repeated
// requests for one kind do not use it up.
func TestCandidateCacheCountsKeys(t *testing.T) {
	s := mustSet(t, mut("a"))
	for i := 0; i < 2*maxCachedKeys; i++ {
		s.candidates(podGVK, Create)
	}
	if n := s.cached.Load(); n != 1 {
		t.Fatalf("cached keys = %d, want 1", n)
	}
}

func TestNormalizeKeepsHugeNumbers(t *testing.T) {
	if v := Normalize(json.Number("1e400")); v != json.Number("1e400") {
		t.Fatalf("1e400 became %#v (%T): a number must not change JSON type", v, v)
	}
}
