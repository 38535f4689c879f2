package gatekeeper

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/google/uuid"

	"github.com/morph-dev/morph/internal/engine"
)

// The annotations Gatekeeper's --mutation-annotations adds.
const (
	AnnotationMutationID = "gatekeeper.sh/mutation-id"
	AnnotationMutations  = "gatekeeper.sh/mutations"
)

// annotationFinalizer adds the mutation annotations to an object the Gatekeeper
// mutators changed. It names the Gatekeeper mutators of the run's trace, as Gatekeeper
// (which knows only its own mutators) would.
type annotationFinalizer struct {
	names map[engine.ID]string
}

func newAnnotationFinalizer(ms []*mutator) *annotationFinalizer {
	f := &annotationFinalizer{names: make(map[engine.ID]string, len(ms))}
	for _, m := range ms {
		f.names[m.id] = m.annotationName()
	}
	return f
}

// Name names the finalizer in traces.
func (f *annotationFinalizer) Name() string { return "gatekeeper-mutation-annotations" }

// Finalize writes gatekeeper.sh/mutations (Kind//name:generation, sorted, joined by
// ", ") and gatekeeper.sh/mutation-id, a UUID derived from the request UID or, without
// one, from the submitted object, so the same input always gives the same output.
func (f *annotationFinalizer) Finalize(_ context.Context, req *engine.Request, obj map[string]any, trace []engine.Change, w *engine.Writer) (map[string]any, []string, error) {
	var names []string
	for _, c := range trace {
		if name, ok := f.names[c.ID]; ok && !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return obj, nil, nil
	}
	slices.Sort(names)
	id, err := mutationID(req)
	if err != nil {
		return obj, nil, fmt.Errorf("mutation id: %w", err)
	}
	meta, _ := obj["metadata"].(map[string]any)
	ann, _ := meta["annotations"].(map[string]any)
	want := map[string]string{AnnotationMutations: strings.Join(names, ", "), AnnotationMutationID: id}
	var newAnn map[string]any
	for _, k := range []string{AnnotationMutationID, AnnotationMutations} {
		if cur, ok := ann[k].(string); ok && cur == want[k] {
			continue
		}
		if newAnn == nil {
			newAnn = w.Map(ann)
		}
		newAnn[k] = want[k]
		w.Changed(engine.Pointer("metadata", "annotations", k))
	}
	if newAnn == nil {
		return obj, nil, nil
	}
	newMeta := w.Map(meta)
	newMeta["annotations"] = newAnn
	out := w.Map(obj)
	out["metadata"] = newMeta
	return out, nil, nil
}

// mutationID is a name-based (version 5) UUID of the request UID, or of the submitted
// object's JSON (map keys sorted) when the request has no UID (offline).
func mutationID(req *engine.Request) (string, error) {
	name := "uid:" + req.UID
	if req.UID == "" {
		raw, err := json.Marshal(req.Object)
		if err != nil {
			return "", err
		}
		name = "object:" + string(raw)
	}
	// The namespace UUID of morph's mutation ids (itself a v5 UUID of "morph.dev").
	ns := uuid.UUID{0x6b, 0x1f, 0x3c, 0x52, 0x9e, 0x4d, 0x5a, 0x07, 0x8c, 0x31, 0x2d, 0x90, 0x4e, 0x7a, 0x15, 0xc8}
	return uuid.NewSHA1(ns, []byte(name)).String(), nil
}
