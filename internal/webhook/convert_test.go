package webhook

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/morph-dev/morph/internal/engine"
	"github.com/morph-dev/morph/internal/policy"
)

func widget(version, name string, spec map[string]any) map[string]any {
	return map[string]any{"apiVersion": "demo.morph.dev/" + version, "kind": "Widget",
		"metadata": map[string]any{"name": name, "namespace": "demo"}, "spec": spec}
}

func TestConvert(t *testing.T) {
	tests := []struct {
		name    string
		desired string
		objects []map[string]any
		want    []map[string]any // nil: failure
		message string
	}{
		{
			name:    "objects are converted in request order",
			desired: "demo.morph.dev/v2",
			objects: []map[string]any{widget("v1", "a", map[string]any{"size": 1}), widget("v1", "b", map[string]any{"size": 2})},
			want:    []map[string]any{widget("v2", "a", map[string]any{"replicas": 1}), widget("v2", "b", map[string]any{"replicas": 2})},
		},
		{
			name:    "an object already at the desired version is returned unchanged",
			desired: "demo.morph.dev/v1",
			objects: []map[string]any{widget("v1", "a", map[string]any{"size": 1}), widget("v2", "b", map[string]any{"replicas": 3})},
			want:    []map[string]any{widget("v1", "a", map[string]any{"size": 1}), widget("v1", "b", map[string]any{"size": 3})},
		},
		{
			name:    "a converter error fails the review and names the object",
			desired: "demo.morph.dev/v2",
			objects: []map[string]any{widget("v1", "a", map[string]any{"size": 1}), widget("v1", "b", nil)},
			message: "objects[1] (Widget demo/b): converting demo.morph.dev/v1 to demo.morph.dev/v2 with Conversion/widgets: spec is required",
		},
		{
			name:    "a kind without a converter fails the review",
			desired: "other.morph.dev/v2",
			objects: []map[string]any{{"apiVersion": "other.morph.dev/v1", "kind": "Gadget", "metadata": map[string]any{"name": "g"}}},
			message: "objects[0] (Gadget g): no conversion policy for Gadget.other.morph.dev",
		},
		{
			name:    "conversion across groups is refused",
			desired: "other.morph.dev/v2",
			objects: []map[string]any{widget("v1", "a", map[string]any{"size": 1})},
			message: `cannot convert group "demo.morph.dev" to "other.morph.dev"`,
		},
		{
			name:    "an object without a kind is refused",
			desired: "demo.morph.dev/v2",
			objects: []map[string]any{{"metadata": map[string]any{"name": "x"}}},
			message: "objects[0] ( x): apiVersion and kind are required",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newTestServer(t, &policy.Bundle{Converters: converters(&versionConverter{})})
			w := post(t, s.Handler(), "/convert", conversionBody(t, "c-1", tt.desired, tt.objects...))
			if w.Code != http.StatusOK {
				t.Fatalf("status %d: %s", w.Code, w.Body)
			}
			var review apiextensionsv1.ConversionReview
			if err := json.Unmarshal(w.Body.Bytes(), &review); err != nil {
				t.Fatal(err)
			}
			resp := review.Response
			if review.Kind != "ConversionReview" || review.APIVersion != "apiextensions.k8s.io/v1" || resp == nil || resp.UID != "c-1" {
				t.Fatalf("answer is not a ConversionReview for uid c-1: %s", w.Body)
			}
			if tt.want == nil {
				if resp.Result.Status != metav1.StatusFailure || !strings.Contains(resp.Result.Message, tt.message) || resp.ConvertedObjects != nil {
					t.Fatalf("result = %+v with %d objects, want Failure holding %q and no objects", resp.Result, len(resp.ConvertedObjects), tt.message)
				}
				return
			}
			if resp.Result.Status != metav1.StatusSuccess || len(resp.ConvertedObjects) != len(tt.want) {
				t.Fatalf("result %+v with %d objects, want Success with %d", resp.Result, len(resp.ConvertedObjects), len(tt.want))
			}
			for i, raw := range resp.ConvertedObjects {
				var got map[string]any
				if err := json.Unmarshal(raw.Raw, &got); err != nil {
					t.Fatal(err)
				}
				if !jsonEqual(got, tt.want[i]) {
					t.Errorf("object %d = %s, want %v", i, raw.Raw, tt.want[i])
				}
			}
		})
	}
}

func TestConvertCountsInMetricsAndStats(t *testing.T) {
	conv := &versionConverter{}
	s := newTestServer(t, &policy.Bundle{Converters: converters(conv)})
	post(t, s.Handler(), "/convert", conversionBody(t, "c", "demo.morph.dev/v2", widget("v1", "a", map[string]any{"size": 1}), widget("v1", "b", map[string]any{"size": 2})))
	post(t, s.Handler(), "/convert", conversionBody(t, "c", "demo.morph.dev/v2", widget("v1", "a", nil)))
	metrics := get(t, s.Handler(), "/metrics")
	for _, want := range []string{`morph_conversions_total{outcome="success"} 2`, `morph_conversions_total{outcome="failure"} 1`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	stats := get(t, s.Handler(), "/katalog/widget-v2")
	var got map[string]map[string]any
	if err := json.Unmarshal([]byte(stats), &got); err != nil {
		t.Fatalf("katalog statistics are not JSON: %v\n%s", err, stats)
	}
	if got["conversion"]["total"] != float64(3) || got["conversion"]["enabled"] != true {
		t.Errorf("statistics = %s, want conversion.total 3 (the failing call counted too)", stats)
	}
}

// pairConverter serves the statistics of two entries, as a Katalog converter does.
type pairConverter struct{ *versionConverter }

func (c pairConverter) converter() engine.Converter {
	conv := c.versionConverter.converter()
	conv.Stats = &engine.Stats{Route: "katalog", Entries: func() map[string]any {
		snap := map[string]any{"total": c.total.Load()}
		return map[string]any{
			"widget-v1": map[string]any{"name": "widget-v1", "conversion": snap},
			"widget-v2": map[string]any{"name": "widget-v2", "conversion": snap},
		}
	}}
	return conv
}

func TestEntryStatsOfSeveralEntries(t *testing.T) {
	conv := pairConverter{&versionConverter{}}
	s := newTestServer(t, &policy.Bundle{Converters: converters(conv)})
	post(t, s.Handler(), "/convert", conversionBody(t, "c", "demo.morph.dev/v2", widget("v1", "a", map[string]any{"size": 1})))
	for _, entry := range []string{"widget-v1", "widget-v2"} {
		var got map[string]any
		if err := json.Unmarshal([]byte(get(t, s.Handler(), "/katalog/"+entry)), &got); err != nil {
			t.Fatal(err)
		}
		if got["name"] != entry || !jsonEqual(got["conversion"], map[string]any{"total": 1}) {
			t.Errorf("/katalog/%s = %v", entry, got)
		}
	}
}
