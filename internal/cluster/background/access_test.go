package background

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/record"

	"github.com/morph-dev/morph/internal/engine"
)

// denyUpdates allows every verb but update.
type denyUpdates struct{ asked []string }

func (d *denyUpdates) Allowed(_ context.Context, verb string, r schema.GroupVersionResource, sub string) (bool, error) {
	d.asked = append(d.asked, access{verb, r, sub}.String())
	return verb != "update", nil
}

type onePolicy struct{}

func (onePolicy) Object(id engine.ID) (*corev1.ObjectReference, string, bool) {
	return &corev1.ObjectReference{Kind: id.Kind, Name: id.Name}, "1", true
}

// TestCheckAccess: the permissions a policy's targets need are reviewed (get and list
// on the resource, update on the route of the write; wildcards skipped), and the
// missing ones are a Warning Event on the policy.
func TestCheckAccess(t *testing.T) {
	reviewer := &denyUpdates{}
	recorder := record.NewFakeRecorder(4)
	c, err := New(Options{Client: newFakeClient(), Namespace: "morph", Access: reviewer, Recorder: recorder, Policies: onePolicy{}})
	if err != nil {
		t.Fatal(err)
	}
	widgets := schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}
	c.checkAccess(context.Background(), []engine.ID{{Kind: "MutatingPolicy", Name: "p"}}, targetAccess([]engine.ObjectRef{
		{Resource: widgets, SubResource: "status"},
		{Resource: schema.GroupVersionResource{Group: "*", Version: "*", Resource: "*"}},
	}))
	want := []string{"get widgets.example.com", "list widgets.example.com", "update widgets/status.example.com"}
	if len(reviewer.asked) != len(want) {
		t.Fatalf("asked %v, want %v", reviewer.asked, want)
	}
	for i := range want {
		if reviewer.asked[i] != want[i] {
			t.Errorf("asked %v, want %v", reviewer.asked, want)
		}
	}
	select {
	case e := <-recorder.Events:
		if e != "Warning "+ReasonPermissionMissing+" morph may not update widgets/status.example.com: grant it to morph's ServiceAccount (docs/cluster.md, RBAC of the background controller)" {
			t.Errorf("event %q", e)
		}
	default:
		t.Error("no event")
	}
}
