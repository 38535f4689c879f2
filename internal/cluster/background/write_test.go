package background

import (
	"context"
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/morph-dev/morph/internal/engine"
	"github.com/morph-dev/morph/internal/request"
)

var configMaps = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}

func configMapTarget(name string) request.Target {
	return request.Target{Resource: configMaps, Kind: schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, Namespace: "apps", Name: name}
}

func newConfigMap(name string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": name, "namespace": "apps", "resourceVersion": "1"},
		"data":     map[string]any{"k": "v"},
	}}
}

// labelled is an evaluation that adds a label, counting its calls.
func labelled(calls *int) evaluate {
	return func(obj map[string]any) (*engine.Result, error) {
		*calls++
		u := (&unstructured.Unstructured{Object: obj}).DeepCopy()
		if u.GetLabels()["done"] == "yes" {
			return &engine.Result{Object: obj}, nil
		}
		u.SetLabels(map[string]string{"done": "yes"})
		return &engine.Result{Object: u.Object, Patch: engine.Patch{{Op: "add", Path: "/metadata/labels", Value: map[string]any{"done": "yes"}}}}, nil
	}
}

// fakeController is a controller on client-go's fake dynamic client, whose updates
// fail with a conflict while conflicts lasts (-1: always).
func fakeController(t *testing.T, conflicts int, objs ...runtime.Object) (*Controller, *dynamicfake.FakeDynamicClient) {
	t.Helper()
	client := dynamicfake.NewSimpleDynamicClient(runtime.NewScheme(), objs...)
	client.PrependReactor("update", "*", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if conflicts == 0 {
			return false, nil, nil
		}
		if conflicts > 0 {
			conflicts--
		}
		return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: a.GetResource().Resource}, "x", errors.New("the object has been modified"))
	})
	c, err := New(Options{Client: client, Namespace: "morph"})
	if err != nil {
		t.Fatal(err)
	}
	return c, client
}

func updates(client *dynamicfake.FakeDynamicClient) []clienttesting.UpdateAction {
	var out []clienttesting.UpdateAction
	for _, a := range client.Actions() {
		if u, ok := a.(clienttesting.UpdateAction); ok {
			out = append(out, u)
		}
	}
	return out
}

// TestWriteConflicts: a conflict makes the controller read and evaluate again, and
// the write that follows carries the resourceVersion read; after ConflictRetries
// conflicts in a row it gives up with errConflicts (the item goes back to the queue).
func TestWriteConflicts(t *testing.T) {
	for _, tc := range []struct {
		name      string
		conflicts int
		wantCalls int
		wantErr   bool
	}{
		{"no conflict", 0, 1, false},
		{"two conflicts", 2, 3, false},
		{"always", -1, DefaultConflictRetries, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, client := fakeController(t, tc.conflicts, newConfigMap("cm"))
			calls := 0
			out, err := c.write(context.Background(), sourceScan, configMapTarget("cm"), labelled(&calls))
			if tc.wantErr != (err != nil) || (err != nil && !errors.Is(err, errConflicts)) {
				t.Fatalf("error %v, want a conflict error: %v", err, tc.wantErr)
			}
			if calls != tc.wantCalls {
				t.Errorf("evaluated %d times, want %d", calls, tc.wantCalls)
			}
			if got := counterValue(t, c.metrics.conflicts.WithLabelValues(sourceScan)); int(got) != tc.wantCalls-1+boolInt(tc.wantErr) {
				t.Errorf("conflicts counted %v, want %d", got, tc.wantCalls-1+boolInt(tc.wantErr))
			}
			for _, u := range updates(client) {
				if rv := u.GetObject().(*unstructured.Unstructured).GetResourceVersion(); rv != "1" {
					t.Errorf("update without the resourceVersion read: %q", rv)
				}
			}
			if tc.wantErr {
				return
			}
			if out.outcome != outcomeWritten {
				t.Errorf("outcome %q, want written", out.outcome)
			}
			got, err := client.Resource(configMaps).Namespace("apps").Get(context.Background(), "cm", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got.GetLabels()["done"] != "yes" || got.Object["data"].(map[string]any)["k"] != "v" {
				t.Errorf("stored %v", got.Object)
			}
		})
	}
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestWriteNothing: an unchanged object is not written; a missing one is gone.
func TestWriteNothing(t *testing.T) {
	done := newConfigMap("done")
	done.SetLabels(map[string]string{"done": "yes"})
	c, client := fakeController(t, 0, done)
	calls := 0
	out, err := c.write(context.Background(), sourceScan, configMapTarget("done"), labelled(&calls))
	if err != nil || out.outcome != outcomeUnchanged {
		t.Errorf("unchanged object: outcome %q, error %v", out.outcome, err)
	}
	out, err = c.write(context.Background(), sourceScan, configMapTarget("missing"), labelled(&calls))
	if err != nil || out.outcome != outcomeGone {
		t.Errorf("missing object: outcome %q, error %v", out.outcome, err)
	}
	if n := len(updates(client)); n != 0 {
		t.Errorf("%d updates, want none", n)
	}
}

// TestWriteSubresource: the target's subresource is the route of the update.
func TestWriteSubresource(t *testing.T) {
	c, client := fakeController(t, 0, newConfigMap("cm"))
	target := configMapTarget("cm")
	target.SubResource = "status"
	calls := 0
	if _, err := c.write(context.Background(), sourceScan, target, labelled(&calls)); err != nil {
		t.Fatal(err)
	}
	us := updates(client)
	if len(us) != 1 || us[0].GetSubresource() != "status" {
		t.Fatalf("updates %v, want one of the status subresource", us)
	}
}

// TestWriteEvaluationError: an evaluation's error is the item's error, and nothing is
// written.
func TestWriteEvaluationError(t *testing.T) {
	c, client := fakeController(t, 0, newConfigMap("cm"))
	boom := errors.New("boom")
	_, err := c.write(context.Background(), sourceScan, configMapTarget("cm"), func(map[string]any) (*engine.Result, error) { return nil, boom })
	if !errors.Is(err, boom) {
		t.Errorf("error %v, want boom", err)
	}
	if n := len(updates(client)); n != 0 {
		t.Errorf("%d updates, want none", n)
	}
}

// TestRequestSpec: a BackgroundRequest's spec reads back as the policy and the trigger
// it was written from, whole numbers as int64 (the engine's value model).
func TestRequestSpec(t *testing.T) {
	id := engine.ID{Dialect: "cel", Kind: "MutatingPolicy", Name: "p"}
	req := &engine.Request{
		UID: "u", Kind: schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, Resource: configMaps,
		Operation: engine.Delete, Namespace: "apps", Name: "cm",
		OldObject: map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "cm", "generation": int64(3)}},
		UserInfo:  engine.UserInfo{Username: "alice", Groups: []string{"devs"}},
	}
	spec, err := requestSpec(id, req)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "morph.dev/v1alpha1", "kind": "BackgroundRequest", "metadata": map[string]any{"name": "bg-1"}, "spec": spec}}
	// What the API server stores is JSON: go through it as the client does.
	data, err := u.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	back := &unstructured.Unstructured{}
	if err := back.UnmarshalJSON(data); err != nil {
		t.Fatal(err)
	}
	gotID, got, err := decodeRequest(back)
	if err != nil {
		t.Fatal(err)
	}
	if gotID != id {
		t.Errorf("policy %+v, want %+v", gotID, id)
	}
	if got.Operation != engine.Delete || got.Object != nil || got.UserInfo.Username != "alice" || got.Name != "cm" {
		t.Errorf("trigger %+v", got)
	}
	if g := got.OldObject["metadata"].(map[string]any)["generation"]; g != int64(3) {
		t.Errorf("generation %T %v, want int64 3", g, g)
	}
}
