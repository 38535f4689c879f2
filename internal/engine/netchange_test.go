package engine

import (
	"context"
	"errors"
	"testing"
)

// Two mutators that set one field to different values undo each other within a pass.
// When the field already holds the last writer's value, the pass's net effect is
// nothing and, for ReinvokeIfNeeded mutators, the object has converged after one pass
// (Gatekeeper's rule, pkg/mutation/system.go System.mutate). ReinvokeOnce mutators keep
// kube-apiserver's rule: any reported change runs them a second time.
func TestNetEffectConvergence(t *testing.T) {
	for _, tc := range []struct {
		name       string
		reinvoke   Reinvocation
		start      any
		wantPasses int
	}{
		{"IfNeeded, no net change: one pass", ReinvokeIfNeeded, int64(2), 1},
		{"IfNeeded, net change: a second pass settles", ReinvokeIfNeeded, nil, 2},
		{"Once, no net change: still a second run", ReinvokeOnce, int64(2), 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			one := mut("one", func(m *setField) { m.key, m.value, m.reinvoke = "priority", int64(1), tc.reinvoke })
			two := mut("two", func(m *setField) { m.key, m.value, m.reinvoke = "priority", int64(2), tc.reinvoke })
			in := newPod()
			if tc.start != nil {
				in["spec"].(map[string]any)["priority"] = tc.start
			}
			res, err := mustSet(t, one, two).Mutate(context.Background(), &Request{Kind: podGVK, Operation: Create, Object: in})
			if err != nil {
				t.Fatal(err)
			}
			if got := res.Object["spec"].(map[string]any)["priority"]; got != int64(2) {
				t.Fatalf("priority = %v, want the last writer's 2", got)
			}
			if res.Passes != tc.wantPasses {
				t.Fatalf("passes = %d, want %d", res.Passes, tc.wantPasses)
			}
			if got := in["spec"].(map[string]any)["priority"]; got != tc.start && tc.start != nil {
				t.Fatal("the input object was modified")
			}
		})
	}
}

// A pass that ends where it started converges even when its mutators keep changing
// the object within it (they would otherwise fail as not converging).
func TestNetEffectEndsOscillation(t *testing.T) {
	one := mut("one", func(m *setField) { m.key, m.value = "priority", int64(1) })
	two := mut("two", func(m *setField) { m.key, m.value = "priority", int64(2) })
	_, err := mustSet(t, one, two).Mutate(context.Background(), &Request{Kind: podGVK, Operation: Create, Object: newPod()})
	var nc *NotConvergedError
	if errors.As(err, &nc) {
		t.Fatalf("not converged: %v", err)
	}
}

func TestNetChanged(t *testing.T) {
	before := map[string]any{"spec": map[string]any{"a": "x", "l": []any{map[string]any{"k/~": int64(1)}}}}
	for _, tc := range []struct {
		name  string
		after map[string]any
		paths []string
		want  bool
	}{
		{"same value", map[string]any{"spec": map[string]any{"a": "x"}}, []string{"/spec/a"}, false},
		{"other value", map[string]any{"spec": map[string]any{"a": "y"}}, []string{"/spec/a"}, true},
		{"removed", map[string]any{"spec": map[string]any{}}, []string{"/spec/a"}, true},
		{"added", map[string]any{"spec": map[string]any{"a": "x", "b": "z"}}, []string{"/spec/b"}, true},
		{"escaped key, number types", map[string]any{"spec": map[string]any{"l": []any{map[string]any{"k/~": 1.0}}}}, []string{"/spec/l/0/k~1~0"}, false},
		{"index beyond the list", map[string]any{"spec": map[string]any{"l": []any{}}}, []string{"/spec/l/0"}, true},
		{"unrecorded changes are not seen", map[string]any{"spec": map[string]any{"a": "x", "b": "z"}}, []string{"/spec/a"}, false},
	} {
		if got := netChanged(before, tc.after, tc.paths); got != tc.want {
			t.Errorf("%s: netChanged = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// A ReinvokeOnce mutator that would run in the next pass keeps kube-apiserver's rule
// even when the pass's changers are all ReinvokeIfNeeded: it runs a second time.
func TestNetEffectKeepsOnceReinvocation(t *testing.T) {
	calls := 0
	once := mut("a-once", func(m *setField) { m.key, m.value, m.reinvoke, m.calls = "other", "x", ReinvokeOnce, &calls })
	one := mut("one", func(m *setField) { m.key, m.value = "priority", int64(1) })
	two := mut("two", func(m *setField) { m.key, m.value = "priority", int64(2) })
	in := newPod()
	in["spec"].(map[string]any)["priority"] = int64(2)
	in["spec"].(map[string]any)["other"] = "x"
	if _, err := mustSet(t, once, one, two).Mutate(context.Background(), &Request{Kind: podGVK, Operation: Create, Object: in}); err != nil {
		t.Fatal(err)
	}
	if calls != 2 {
		t.Fatalf("the Once mutator ran %d times, want 2", calls)
	}
}
