package katalog

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/morph-dev/morph/internal/engine"
)

// realisticWebsite is a Website as a cluster returns it: managed fields, labels,
// annotations, a nested spec and a status.
func realisticWebsite() map[string]any {
	labels := map[string]any{}
	annotations := map[string]any{}
	for i := range 8 {
		labels[fmt.Sprintf("example.com/label-%d", i)] = fmt.Sprintf("value-%d", i)
		annotations[fmt.Sprintf("example.com/annotation-%d", i)] = fmt.Sprintf("a longer annotation value number %d", i)
	}
	var routes []any
	for i := range 10 {
		routes = append(routes, map[string]any{"path": fmt.Sprintf("/api/v%d", i), "backend": fmt.Sprintf("svc-%d", i), "port": int64(8000 + i), "tls": i%2 == 0})
	}
	var managed []any
	for i := range 3 {
		managed = append(managed, map[string]any{"manager": fmt.Sprintf("kubectl-%d", i), "operation": "Apply", "apiVersion": "demo.orkestra.io/v1alpha1", "time": "2024-05-01T10:00:00Z", "fieldsType": "FieldsV1",
			"fieldsV1": map[string]any{"f:spec": map[string]any{"f:version": map[string]any{}, "f:routes": map[string]any{}}}})
	}
	return map[string]any{
		"apiVersion": "demo.orkestra.io/v1alpha1",
		"kind":       "Website",
		"metadata": map[string]any{
			"name": "my-site", "namespace": "web", "uid": "0b7c9a0e-3d1f-4c8e-9a51-4f8f1b2f3c4d", "resourceVersion": "123456", "generation": int64(4),
			"creationTimestamp": "2024-05-01T10:00:00Z", "labels": labels, "annotations": annotations, "managedFields": managed,
		},
		"spec": map[string]any{
			"version": "1.4", "image": "nginx:1.25", "routes": routes,
			"resources": map[string]any{"requests": map[string]any{"cpu": "100m", "memory": "128Mi"}, "limits": map[string]any{"cpu": "1", "memory": "512Mi"}},
		},
		"status": map[string]any{"phase": "Ready", "conditions": []any{map[string]any{"type": "Ready", "status": "True", "lastTransitionTime": "2024-05-01T10:01:00Z"}}},
	}
}

func realisticCronJob() map[string]any {
	obj := realisticWebsite()
	obj["apiVersion"] = "demo.orkestra.io/v1"
	obj["kind"] = "CronJob"
	obj["spec"].(map[string]any)["schedule"] = "0 2 * * 1-5"
	return obj
}

// BenchmarkWebsiteEntry applies spec 000's complete Website entry through the engine,
// patch included.
func BenchmarkWebsiteEntry(b *testing.B) {
	bundle := compileDir(b, "testdata/mutate/website-complete")
	set, err := engine.NewSet(bundle.Mutators)
	if err != nil {
		b.Fatal(err)
	}
	req := requestFor(realisticWebsite(), engine.Create)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		res, err := set.Mutate(ctx, req)
		if err != nil || len(res.Patch) != 5 {
			b.Fatalf("%v %v", err, res.Patch)
		}
	}
}

// BenchmarkConvertCronJob converts a realistic object from v1 to v2.
func BenchmarkConvertCronJob(b *testing.B) {
	conv, _ := cronConverter(b)
	obj := realisticCronJob()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := conv.Convert(ctx, obj, "demo.orkestra.io/v2"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkJSONRoundTripWebsite is the yardstick: encoding/json decode and encode of
// the same Website object.
func BenchmarkJSONRoundTripWebsite(b *testing.B) { benchJSONRoundTrip(b, realisticWebsite()) }

// BenchmarkJSONRoundTripCronJob is BenchmarkConvertCronJob's yardstick: encoding/json
// decode and encode of the same CronJob object.
func BenchmarkJSONRoundTripCronJob(b *testing.B) { benchJSONRoundTrip(b, realisticCronJob()) }

func benchJSONRoundTrip(b *testing.B, obj map[string]any) {
	data, err := json.Marshal(obj)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		var v map[string]any
		if err := json.Unmarshal(data, &v); err != nil {
			b.Fatal(err)
		}
		if _, err := json.Marshal(v); err != nil {
			b.Fatal(err)
		}
	}
}
