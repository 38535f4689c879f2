package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/morph-dev/morph/internal/webhook"
)

const workload = "../testdata/gatekeeper-workload"

// BenchmarkHandlers times one /mutate of the workload without the network: morph's
// handler against the bare decode-and-allow handler.
func BenchmarkHandlers(b *testing.B) {
	body, _, err := reviewBody(workload)
	if err != nil {
		b.Fatal(err)
	}
	server, err := webhook.New(webhook.Options{
		Source: &webhook.FolderSource{
			Policies:  filepath.Join(workload, "mutators-100.yaml"),
			Context:   []string{filepath.Join(workload, "namespace.json")},
			NewLoader: newLoader,
		},
		Admission: true, Conversion: true,
	})
	if err != nil {
		b.Fatal(err)
	}
	if err := server.Reload(); err != nil {
		b.Fatal(err)
	}
	for _, h := range []struct {
		name    string
		handler http.Handler
	}{{"bare", http.HandlerFunc(bareHandler)}, {"morph", server.Handler()}} {
		b.Run(h.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				r := httptest.NewRequest(http.MethodPost, "/mutate?timeout=10s", bytes.NewReader(body))
				r.Header.Set("Content-Type", "application/json")
				w := httptest.NewRecorder()
				h.handler.ServeHTTP(w, r)
				if w.Code != http.StatusOK {
					b.Fatalf("status %d: %s", w.Code, w.Body)
				}
			}
		})
	}
}

func TestReviewOfTheWorkloadIsPatchedAsExpected(t *testing.T) {
	cfg, err := parseFlags([]string{"-workload", workload, "-rates", "50", "-duration", "1s", "-slice", "500ms", "-warmup", "100ms"})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := run(t.Context(), cfg, &out, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Patch verified against expected-pod.json: yes", "| 50 | bare | 50 | 50 | 0 |", "| 50 | morph | 50 | 50 | 0 |"} {
		if !bytes.Contains(out.Bytes(), []byte(want)) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
}
