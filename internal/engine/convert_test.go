package engine

import (
	"context"
	"maps"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestConversions(t *testing.T) {
	gk := schema.GroupKind{Group: "demo.io", Kind: "Widget"}
	convert := func(_ context.Context, obj map[string]any, to string) (map[string]any, error) {
		out := maps.Clone(obj)
		out["apiVersion"] = to
		return out, nil
	}
	wrong := func(_ context.Context, obj map[string]any, _ string) (map[string]any, error) { return obj, nil }
	c, err := NewConversions([]Converter{
		{Descriptor: Descriptor{ID: ID{Kind: "Katalog", Name: "widgets"}}, GroupKind: gk, Convert: convert},
		{Descriptor: Descriptor{ID: ID{Kind: "Katalog", Name: "broken"}}, GroupKind: schema.GroupKind{Group: "demo.io", Kind: "Broken"}, Convert: wrong},
	})
	if err != nil {
		t.Fatal(err)
	}
	widget := map[string]any{"apiVersion": "demo.io/v1", "kind": "Widget"}
	tests := []struct {
		name, desired string
		obj           map[string]any
		want, err     string
		changed       bool
	}{
		{name: "full version", desired: "demo.io/v2", obj: widget, want: "demo.io/v2", changed: true},
		{name: "bare version keeps the group", desired: "v2", obj: widget, want: "demo.io/v2", changed: true},
		{name: "same version", desired: "demo.io/v1", obj: widget, want: "demo.io/v1"},
		{name: "group change refused", desired: "other.io/v2", obj: widget, err: "conversion stays within a group"},
		{name: "unknown kind", desired: "v2", obj: map[string]any{"apiVersion": "demo.io/v1", "kind": "Gadget"}, err: "no conversion policy for Gadget.demo.io"},
		{name: "wrong answer refused", desired: "v2", obj: map[string]any{"apiVersion": "demo.io/v1", "kind": "Broken"}, err: `returned apiVersion "demo.io/v1" instead of "demo.io/v2"`},
		{name: "no kind", desired: "v2", obj: map[string]any{"apiVersion": "demo.io/v1"}, err: "apiVersion and kind are required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, changed, err := c.Convert(context.Background(), tt.obj, tt.desired)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if out["apiVersion"] != tt.want || changed != tt.changed {
				t.Fatalf("got %v changed=%v", out["apiVersion"], changed)
			}
		})
	}
	if _, err := NewConversions([]Converter{
		{Descriptor: Descriptor{ID: ID{Name: "a"}}, GroupKind: gk, Convert: convert},
		{Descriptor: Descriptor{ID: ID{Name: "b"}}, GroupKind: gk, Convert: convert},
	}); err == nil {
		t.Fatal("two converters of one kind accepted")
	}
}
