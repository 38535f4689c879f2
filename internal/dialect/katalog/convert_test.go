package katalog

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/morph-dev/morph/internal/engine"
)

func cronConverter(t testing.TB) (engine.Converter, []*Entry) {
	t.Helper()
	es, b := compileDirEntries(t, "testdata/convert/cronjob-v1-to-v2")
	return b.Converters[0], es
}

// randomCron builds a valid single-spaced five-field expression, or a macro.
func randomCron(r *rand.Rand) (expr, canonical string) {
	macros := [][2]string{{"@hourly", "0 * * * *"}, {"@daily", "0 0 * * *"}, {"@midnight", "0 0 * * *"}, {"@weekly", "0 0 * * 0"}, {"@monthly", "0 0 1 * *"}, {"@yearly", "0 0 1 1 *"}, {"@annually", "0 0 1 1 *"}}
	if r.IntN(5) == 0 {
		m := macros[r.IntN(len(macros))]
		return m[0], m[1]
	}
	field := func(i int) string {
		b := cronBounds[i]
		pick := func() int { return b.lo + r.IntN(b.hi-b.lo+1) }
		item := func() string {
			switch r.IntN(6) {
			case 0:
				return "*"
			case 1:
				return fmt.Sprintf("*/%d", 1+r.IntN(10))
			case 2:
				a, c := pick(), pick()
				return fmt.Sprintf("%d-%d", min(a, c), max(a, c))
			case 3:
				a, c := pick(), pick()
				return fmt.Sprintf("%d-%d/%d", min(a, c), max(a, c), 1+r.IntN(5))
			case 4:
				if i == 3 {
					return monthNames[r.IntN(12)]
				}
				if i == 4 {
					return strings.ToLower(dayNames[r.IntN(7)])
				}
			}
			return fmt.Sprint(pick())
		}
		parts := []string{item()}
		for r.IntN(3) == 0 {
			parts = append(parts, item())
		}
		return strings.Join(parts, ",")
	}
	fs := make([]string, 5)
	for i := range fs {
		fs[i] = field(i)
	}
	e := strings.Join(fs, " ")
	return e, e
}

// TestCronRoundTripProperty: v1 -> v2 -> v1 gives back the original object for
// generated expressions (macros come back in their five-field form) and objects with
// extra fields; v2 -> v1 -> v2 gives back the v2 object.
func TestCronRoundTripProperty(t *testing.T) {
	conv, _ := cronConverter(t)
	r := rand.New(rand.NewPCG(1, 2))
	ctx := context.Background()
	for i := range 2000 {
		expr, canonical := randomCron(r)
		obj := map[string]any{
			"apiVersion": "demo.orkestra.io/v1", "kind": "CronJob",
			"metadata": map[string]any{"name": fmt.Sprintf("job-%d", i), "namespace": "ns", "labels": map[string]any{"n": fmt.Sprint(i)}},
			"spec":     map[string]any{"schedule": expr, "image": "img", "extra": map[string]any{"deep": []any{int64(i), "x", nil, 1.5}}},
			"status":   map[string]any{"active": int64(r.IntN(3))},
		}
		if r.IntN(10) == 0 {
			delete(obj["spec"].(map[string]any), "schedule")
		}
		before := engine.DeepCopyMap(obj)
		v2, err := conv.Convert(ctx, obj, "demo.orkestra.io/v2")
		if err != nil {
			t.Fatalf("%q: %v", expr, err)
		}
		if !engine.Equal(obj, before) {
			t.Fatal("the source object was modified")
		}
		back, err := conv.Convert(ctx, v2, "demo.orkestra.io/v1")
		if err != nil {
			t.Fatalf("%q back: %v", expr, err)
		}
		want := engine.DeepCopyMap(before)
		if _, ok := want["spec"].(map[string]any)["schedule"]; ok {
			want["spec"].(map[string]any)["schedule"] = canonical
		}
		if !engine.Equal(back, want) {
			t.Fatalf("%q: round trip\n%v\nwant\n%v", expr, back, want)
		}
		again, err := conv.Convert(ctx, back, "demo.orkestra.io/v2")
		if err != nil || !engine.Equal(again, v2) {
			t.Fatalf("%q: v2 -> v1 -> v2 differs: %v", expr, err)
		}
	}
}

func TestConvertErrors(t *testing.T) {
	conv, _ := cronConverter(t)
	ctx := context.Background()
	obj := map[string]any{"apiVersion": "demo.orkestra.io/v1", "kind": "CronJob", "metadata": map[string]any{"name": "bad", "namespace": "ns"}, "spec": map[string]any{"schedule": "0 2 * *"}}
	tests := []struct {
		obj  map[string]any
		to   string
		want string
	}{
		{obj, "demo.orkestra.io/v2", `converting CronJob ns/bad from v1 to v2: spec.schedule: resolving "{{ cronToMap .spec.schedule }}": error calling cronToMap: cron expression "0 2 * *" has 4 fields: want 5 (minute hour dayOfMonth month dayOfWeek) or a macro such as @daily`},
		{obj, "demo.orkestra.io/v9", `converting CronJob ns/bad from demo.orkestra.io/v1 to demo.orkestra.io/v9: no conversion path from v1 to v9 or through the storage version v1: the declared paths are v1->v2, v2->v1`},
		{obj, "other.io/v2", `converting CronJob ns/bad from demo.orkestra.io/v1 to other.io/v2: this converter converts CronJob.demo.orkestra.io only`},
	}
	for _, tt := range tests {
		_, err := conv.Convert(ctx, tt.obj, tt.to)
		if err == nil || err.Error() != tt.want {
			t.Errorf("error\n%v\nwant\n%s", err, tt.want)
		}
	}
	same, err := conv.Convert(ctx, obj, "demo.orkestra.io/v1")
	if err != nil || !engine.Equal(same, obj) {
		t.Errorf("same version: %v", err)
	}
}

func TestConversionStats(t *testing.T) {
	var s ConversionStats
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 500 {
				var err error
				if i%100 == 0 {
					err = fmt.Errorf("failed")
				}
				s.Record(time.Duration(g*500+i+1)*time.Microsecond, err)
			}
		}()
	}
	wg.Wait()
	snap := s.Snapshot()
	if snap.Total != 4000 || snap.Failures != 40 || !snap.Enabled {
		t.Errorf("snapshot %+v", snap)
	}
	if snap.AvgLatencyMs <= 0 || snap.P95LatencyMs < snap.AvgLatencyMs/2 {
		t.Errorf("latencies %+v", snap)
	}
	var fixed ConversionStats
	for i := 1; i <= 100; i++ {
		fixed.Record(time.Duration(i)*10*time.Microsecond, nil)
	}
	b, _ := json.Marshal(fixed.Snapshot())
	if string(b) != `{"enabled":true,"total":100,"failures":0,"avgLatencyMs":0.505,"p95LatencyMs":0.95}` {
		t.Errorf("json %s", b)
	}
	_, entries := cronConverter(t)
	status, err := entries[1].StatusJSON()
	if err != nil || !strings.Contains(string(status), `"conversion":{"enabled":true,"total":0,"failures":0,"avgLatencyMs":0,"p95LatencyMs":0}`) {
		t.Errorf("status %s %v", status, err)
	}
}

func TestConverterGrouping(t *testing.T) {
	es, b := compileDirEntries(t, "testdata/convert/cronjob-v1-to-v2")
	if len(b.Converters) != 1 || len(es) != 2 || es[0].Name != "cronjob-v1" || !es[0].Conversion.Participant || !es[1].Conversion.UpdateCRD || es[1].Conversion.StorageVersion != "v1" {
		t.Fatalf("converters %d, entries %+v", len(b.Converters), es)
	}
	if id := b.Converters[0].ID; id.Part != "cronjob-v2" || id.Name != "cronjobs" {
		t.Errorf("id %v", id)
	}
	_, err := compileText(t, `apiVersion: orkestra.orkspace.io/v1
kind: Katalog
metadata: {name: k}
spec:
  crds:
    a:
      apiTypes: {group: g.io, version: v1, kind: K}
      conversion: {storageVersion: v1, paths: [{from: v1, to: v2, spec: {}}]}
    b:
      apiTypes: {group: g.io, version: v2, kind: K}
      conversion: {storageVersion: v2, paths: [{from: v1, to: v2, spec: {}}]}
`, Options{})
	if err == nil || !strings.Contains(err.Error(), `spec.crds.b.conversion.storageVersion: Invalid value: "v2": differs from "v1" declared by entry "a"`) {
		t.Errorf("error %v", err)
	}
	lone, err := compileText(t, `apiVersion: orkestra.orkspace.io/v1
kind: Katalog
metadata: {name: k}
spec:
  crds:
    a:
      apiTypes: {group: g.io, version: v1, kind: K}
      conversion: {participant: true}
`, Options{})
	if err != nil || len(lone.Converters) != 0 || len(lone.Warnings) != 1 {
		t.Errorf("lone participant: %v %v", err, lone.Warnings)
	}
}

func FuzzCronToMap(f *testing.F) {
	for _, s := range []string{"0 2 * * 1-5", "@daily", "*/5 1,2 1-31/2 JAN-DEC sun", "61 * * * *", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := cronToMap(s)
		if err != nil || m == nil {
			return
		}
		back, err := cronFromMap(m)
		if err != nil {
			t.Fatalf("%q -> %v -> %v", s, m, err)
		}
		again, err := cronToMap(back)
		if err != nil || !engine.Equal(again, m) {
			t.Fatalf("%q -> %q -> %v (%v)", s, back, again, err)
		}
	})
}
