package gatekeeper

import (
	"context"
	"regexp"
	"testing"

	"github.com/morph-dev/morph/internal/engine"
)

func TestMutationAnnotations(t *testing.T) {
	wl := loadWorkload(t)
	set := loadSet(t, "mutators-10.yaml", Options{MutationAnnotations: true})
	ctx := context.Background()
	res, err := set.Mutate(ctx, podRequest(wl.pod, wl.ns, engine.Create))
	if err != nil {
		t.Fatal(err)
	}
	ann := res.Object["metadata"].(map[string]any)["annotations"].(map[string]any)
	want := "Assign//pod-containers-no-privilege-escalation:1, Assign//pod-containers-pull-always:1, Assign//pod-default-seccomp:1, " +
		"Assign//pod-envoy-memory-limit:1, Assign//pod-payments-priority-class:1, AssignImage//pod-image-mirror:1, " +
		"AssignMetadata//pod-annotation-policy-owner:1, AssignMetadata//pod-label-cost-center:1, " +
		"ModifySet//pod-args-prune-debug:1, ModifySet//pod-checkout-args-merge:1"
	if got := ann[AnnotationMutations]; got != want {
		t.Errorf("%s = %q\nwant %q", AnnotationMutations, got, want)
	}
	id, _ := ann[AnnotationMutationID].(string)
	if !regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`).MatchString(id) {
		t.Errorf("%s = %q is not a version 5 UUID", AnnotationMutationID, id)
	}
	// Deterministic: the same input gives the same bytes.
	again, err := set.Mutate(ctx, podRequest(engine.DeepCopyMap(wl.pod), wl.ns, engine.Create))
	if err != nil {
		t.Fatal(err)
	}
	if !engine.Equal(again.Object, res.Object) {
		t.Error("two runs on the same input differ")
	}
	// The request UID decides the id when there is one.
	req := podRequest(wl.pod, wl.ns, engine.Create)
	req.UID = "705ab4f5-6393-11e8-b7cc-42010a800002"
	withUID, err := set.Mutate(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	uidID := withUID.Object["metadata"].(map[string]any)["annotations"].(map[string]any)[AnnotationMutationID]
	if uidID == id {
		t.Error("the request UID did not change the mutation id")
	}
	// Nothing changed: no annotations.
	zero := loadSet(t, "mutators-0.yaml", Options{MutationAnnotations: true})
	res0, err := zero.Mutate(ctx, podRequest(wl.pod, wl.ns, engine.Create))
	if err != nil {
		t.Fatal(err)
	}
	if res0.Changed() {
		t.Errorf("annotated an object no mutator changed: %v", res0.Patch)
	}
}
