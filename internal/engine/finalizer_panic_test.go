package engine

import (
	"context"
	"strings"
	"testing"
)

type panickingFinalizer struct{}

func (panickingFinalizer) Name() string { return "panicker" }
func (panickingFinalizer) Finalize(context.Context, *Request, map[string]any, []Change, *Writer) (map[string]any, []string, error) {
	panic("finalizer bug")
}

// A finalizer's panic fails the request with an error; it used to crash `morph apply`.
func TestFinalizerPanicIsAnError(t *testing.T) {
	s, err := NewSet([]Mutator{mut("a")}, panickingFinalizer{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Mutate(context.Background(), &Request{Kind: podGVK, Operation: Create, Object: newPod()})
	if err == nil || !strings.Contains(err.Error(), "panicker: panic: finalizer bug") {
		t.Fatalf("got %v", err)
	}
}
