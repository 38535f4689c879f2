package offline

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/morph-dev/morph/internal/engine"
	"github.com/morph-dev/morph/internal/objects"
	"github.com/morph-dev/morph/internal/request"
)

func TestStoreObjects(t *testing.T) {
	store := objects.NewStore()
	for _, o := range []map[string]any{pod("a", "ns"), pod("b", "other")} {
		if err := store.Add(o); err != nil {
			t.Fatal(err)
		}
	}
	objs := StoreObjects{Store: store}
	ctx := context.Background()
	pods := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	if l, err := objs.List(ctx, pods, ""); err != nil || len(l) != 2 {
		t.Errorf("list all: %d, %v", len(l), err)
	}
	if l, err := objs.List(ctx, pods, "ns"); err != nil || len(l) != 1 {
		t.Errorf("list ns: %d, %v", len(l), err)
	}
	if o, err := objs.Get(ctx, pods, "ns", "a"); err != nil || o == nil {
		t.Errorf("get: %v, %v", o, err)
	}
	if o, err := objs.Get(ctx, pods, "ns", "missing"); err != nil || o != nil {
		t.Errorf("get missing: want nil, nil; got %v, %v", o, err)
	}
	if _, err := objs.List(ctx, schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}, ""); err == nil {
		t.Error("an unknown resource must say to pass its CRD")
	}
}

// TestRunBackground checks that work runs in order on the store, each item seeing the
// previous one's write.
func TestRunBackground(t *testing.T) {
	store := objects.NewStore()
	if err := store.Add(pod("a", "ns")); err != nil {
		t.Fatal(err)
	}
	count := engine.Mutator{
		Descriptor: engine.Descriptor{ID: engine.ID{Dialect: "fake", Kind: "P", Name: "count"}, Background: &engine.Background{}, Reinvocation: engine.ReinvokeNever,
			Targets: []engine.Target{{Group: "*", Version: "*", Kind: "*", Operations: engine.AllOperations}}},
		Mutate: func(_ context.Context, _ *engine.Request, obj map[string]any, w *engine.Writer) (map[string]any, error) {
			out := w.Map(obj)
			n, _ := obj["n"].(int64)
			out["n"] = n + 1
			w.Changed("/n")
			return out, nil
		},
	}
	set, err := engine.NewSet([]engine.Mutator{count})
	if err != nil {
		t.Fatal(err)
	}
	rt := &Runtime{Store: store, Set: set}
	ref := engine.ObjectRef{Resource: schema.GroupVersionResource{Version: "v1", Resource: "pods"}, Kind: schema.GroupVersionKind{Version: "v1", Kind: "Pod"}, Namespace: "ns", Name: "a"}
	gone := ref
	gone.Name = "gone"
	w := request.Work{Policy: count.ID, Target: ref}
	done := rt.RunBackground(context.Background(), []request.Work{w, w, {Policy: count.ID, Target: gone}})
	for _, d := range done {
		if d.Err != nil {
			t.Fatal(d.Err)
		}
	}
	if done[2].Result != nil {
		t.Error("a target that does not exist is no work")
	}
	if got, _ := store.Get("", "Pod", "ns", "a"); got["n"] != int64(2) {
		t.Errorf("n = %v, want 2: each item reads the previous one's write", got["n"])
	}
}
