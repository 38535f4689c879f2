package request

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/morph-dev/morph/internal/engine"
)

func TestWorkJSONRoundTrip(t *testing.T) {
	w := Work{
		Policy: engine.ID{Dialect: "cel", Kind: "MutatingPolicy", Name: "p"},
		Target: Target{
			Resource:    schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"},
			Kind:        schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Widget"},
			SubResource: "status", Namespace: "ns", Name: "w",
		},
		Trigger: &engine.Request{Operation: engine.Create, Name: "cm", Object: map[string]any{"data": map[string]any{"n": int64(1)}}},
	}
	b, err := json.Marshal(w)
	if err != nil {
		t.Fatal(err)
	}
	var got Work
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, w) {
		t.Errorf("round trip changed the work:\n got %#v\nwant %#v\njson %s", got, w, b)
	}
}

// fakeBackground is a policy that marks the targets it runs on with its name and
// records the requests it saw.
func fakeBackground(name string, admissionOff bool, targets []string, expression bool) (engine.Mutator, *[]*engine.Request) {
	var seen []*engine.Request
	refs := func(trigger string) []engine.ObjectRef {
		var out []engine.ObjectRef
		for _, t := range targets {
			out = append(out, engine.ObjectRef{
				Resource:  schema.GroupVersionResource{Version: "v1", Resource: "configmaps"},
				Kind:      schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"},
				Namespace: "ns", Name: t + trigger,
			})
		}
		return out
	}
	bg := &engine.Background{
		Triggers: func(_ context.Context, req *engine.Request) (bool, error) { return req.Name == "trigger", nil },
		Targets: func(_ context.Context, trigger *engine.Request, _ engine.Objects) ([]engine.ObjectRef, error) {
			if expression {
				return refs("-of-" + trigger.Name), nil
			}
			return refs(""), nil
		},
		Expression:             expression,
		SkipBackgroundRequests: name != "expr",
		ScanTriggers: func(context.Context, engine.Objects) ([]*engine.Request, error) {
			return []*engine.Request{{Operation: engine.Update, Name: "t1"}, {Operation: engine.Update, Name: "t2"}}, nil
		},
	}
	m := engine.Mutator{
		Descriptor: engine.Descriptor{ID: engine.ID{Dialect: "fake", Kind: "P", Name: name}, AdmissionOff: admissionOff, Background: bg,
			Targets: []engine.Target{{Group: "*", Version: "*", Kind: "*", Operations: engine.AllOperations}}},
		Mutate: func(_ context.Context, req *engine.Request, obj map[string]any, w *engine.Writer) (map[string]any, error) {
			seen = append(seen, req)
			if obj["marked"] == name {
				return obj, nil
			}
			out := w.Map(obj)
			out["marked"] = name
			w.Changed("/marked")
			return out, nil
		},
	}
	return m, &seen
}

func TestTriggeredAndScan(t *testing.T) {
	a, _ := fakeBackground("a", false, []string{"x", "y"}, false)
	off, _ := fakeBackground("off", true, []string{"z"}, false)
	expr, _ := fakeBackground("expr", false, []string{"e"}, true)
	set, err := engine.NewSet([]engine.Mutator{a, off, expr})
	if err != nil {
		t.Fatal(err)
	}
	p := Policies{Set: set}
	ctx := context.Background()
	names := func(ws []Work) string {
		var out []string
		for _, w := range ws {
			s := w.Policy.Name + ":" + w.Target.Name
			if w.Trigger != nil {
				s += "<" + w.Trigger.Name
			}
			out = append(out, s)
		}
		return strings.Join(out, " ")
	}
	tests := []struct {
		name string
		run  func() ([]Work, error)
		want string
	}{
		// Policies off at admission are not triggered by admission.
		{"triggered", func() ([]Work, error) {
			return Triggered(ctx, p, &engine.Request{Operation: engine.Create, Name: "trigger"}, nil)
		}, "a:x<trigger a:y<trigger expr:e-of-trigger<trigger"},
		{"not triggered", func() ([]Work, error) {
			return Triggered(ctx, p, &engine.Request{Operation: engine.Create, Name: "other"}, nil)
		}, ""},
		// A dry run triggers nothing (Kyverno honours SideEffects NoneOnDryRun).
		{"dry run", func() ([]Work, error) {
			return Triggered(ctx, p, &engine.Request{Operation: engine.Create, Name: "trigger", DryRun: true}, nil)
		}, ""},
		// The background controller's own writes trigger only the policies that do
		// not skip background requests.
		{"background user", func() ([]Work, error) {
			bp := p
			bp.BackgroundUser = "system:serviceaccount:morph-system:morph"
			return Triggered(ctx, bp, &engine.Request{Operation: engine.Update, Name: "trigger", UserInfo: engine.UserInfo{Username: bp.BackgroundUser}}, nil)
		}, "expr:e-of-trigger<trigger"},
		// The scan has no trigger; off at admission or not.
		{"scan", func() ([]Work, error) { return Scan(ctx, p, off.ID, nil) }, "off:z"},
		// An expression policy's scan runs once per trigger object.
		{"expression scan", func() ([]Work, error) { return Scan(ctx, p, expr.ID, nil) }, "expr:e-of-t1<t1 expr:e-of-t2<t2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ws, err := tt.run()
			if err != nil {
				t.Fatal(err)
			}
			if got := names(ws); got != tt.want {
				t.Errorf("work %q, want %q", got, tt.want)
			}
		})
	}
	if _, err := Scan(ctx, p, engine.ID{Name: "missing"}, nil); err == nil {
		t.Error("scan of an unknown policy: want an error")
	}
}

// TestBackground checks that a work item runs its policy alone, on the target with no
// old object, under the trigger's operation (a scan: UPDATE of the target itself), and
// that a target already marked gives no patch.
func TestBackground(t *testing.T) {
	a, seenA := fakeBackground("a", false, nil, false)
	b, seenB := fakeBackground("b", false, nil, false)
	set, err := engine.NewSet([]engine.Mutator{a, b})
	if err != nil {
		t.Fatal(err)
	}
	p := Policies{Set: set}
	ctx := context.Background()
	target := map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "x", "namespace": "ns"}}
	ref := Target{Resource: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, Kind: schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, Namespace: "ns", Name: "x", SubResource: "status"}
	trigger := &engine.Request{Operation: engine.Delete, Name: "trigger", OldObject: map[string]any{}}
	res, err := Background(ctx, p, Work{Policy: a.ID, Target: ref, Trigger: trigger}, target)
	if err != nil || !res.Changed() {
		t.Fatalf("changed %v, %v", res != nil && res.Changed(), err)
	}
	if len(*seenB) != 0 || len(*seenA) == 0 {
		t.Fatalf("a ran %d times, b %d: want a only", len(*seenA), len(*seenB))
	}
	req := (*seenA)[0]
	if !req.Background || req.Policy == nil || *req.Policy != a.ID || req.Trigger != trigger || req.Operation != engine.Delete ||
		req.OldObject != nil || req.SubResource != "status" || req.Name != "x" {
		t.Errorf("request %+v", req)
	}
	again, err := Background(ctx, p, Work{Policy: a.ID, Target: ref, Trigger: trigger}, res.Object)
	if err != nil || again.Changed() {
		t.Errorf("no change must write nothing: patch %v, %v", again.Patch, err)
	}
	if _, err := Background(ctx, p, Work{Policy: b.ID, Target: ref}, target); err != nil {
		t.Fatal(err)
	}
	if scan := (*seenB)[0]; scan.Trigger == nil || scan.Trigger.Operation != engine.Update || scan.Operation != engine.Update || scan.Trigger.Name != "x" {
		t.Errorf("a scan's trigger is an UPDATE of the target itself: %+v", scan.Trigger)
	}
	if res, err := Background(ctx, p, Work{Policy: a.ID, Target: ref}, nil); res != nil || err != nil {
		t.Errorf("a target that is gone is no work: %v, %v", res, err)
	}
}
