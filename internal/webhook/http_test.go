package webhook

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/morph-dev/morph/internal/engine"
	"github.com/morph-dev/morph/internal/policy"
)

// get fetches a read-only endpoint, which must answer 200.
func get(t *testing.T, h http.Handler, path string) string {
	t.Helper()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
	if w.Code != http.StatusOK {
		t.Fatalf("GET %s: status %d: %s", path, w.Code, w.Body)
	}
	return w.Body.String()
}

func TestErrorStatuses(t *testing.T) {
	bundle := &policy.Bundle{Mutators: mutators(&labelMutator{name: "team", key: "team", value: "a"})}
	s, err := New(Options{Source: bundleSource(bundle), Admission: true, Conversion: true, MaxBody: 4096})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	panics := newTestServer(t, &policy.Bundle{
		Validators: validators(&labelValidator{name: "explodes", key: "x", panics: true}),
		Converters: converters(&versionConverter{panics: true}),
	})
	finalizerPanics := newTestServer(t, &policy.Bundle{
		Mutators:   mutators(&labelMutator{name: "team", key: "team", value: "a"}),
		Finalizers: finalizers(panicFinalizer),
	})
	good := admissionBody(t, "u", pod(nil))
	big := admissionBody(t, "u", pod(map[string]any{"big": strings.Repeat("x", 5000)}))
	tests := []struct {
		name        string
		server      *Server
		method      string
		path        string
		contentType string
		body        []byte
		chunked     bool
		want        int
		message     string
	}{
		{name: "malformed JSON", path: "/mutate", body: []byte(`{"apiVersion":`), want: 400, message: "not an AdmissionReview"},
		{name: "empty body", path: "/mutate", body: nil, want: 400, message: "empty body"},
		{name: "wrong review version", path: "/mutate", body: []byte(`{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{"uid":"x"}}`), want: 400, message: "list only v1"},
		{name: "no request", path: "/mutate", body: []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`), want: 400, message: "no request"},
		{name: "no uid", path: "/validate", body: []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"kind":{"version":"v1","kind":"Pod"}}}`), want: 400, message: "uid is empty"},
		{name: "object of the wrong type", path: "/mutate", body: []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"x","kind":{"version":"v1","kind":"Pod"},"operation":"CREATE","object":[1,2]}}`), want: 400, message: "request.object: expected a JSON object"},
		{name: "unknown operation", path: "/mutate", body: []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"x","kind":{"version":"v1","kind":"Pod"},"operation":"PATCH","object":{}}}`), want: 400, message: "unknown operation"},
		{name: "bad timeout", path: "/mutate?timeout=soon", body: good, want: 400, message: "timeout"},
		{name: "malformed conversion review", path: "/convert", body: []byte(`{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","request":{"uid":"x"}}`), want: 400, message: "desiredAPIVersion is empty"},
		{name: "GET on a review endpoint", method: http.MethodGet, path: "/mutate", want: 405, message: "send reviews with POST"},
		{name: "POST on a read-only endpoint", method: http.MethodPost, path: "/readyz", contentType: "application/json", want: 405},
		{name: "text/plain", path: "/mutate", contentType: "text/plain", body: good, want: 415, message: "send application/json"},
		{name: "no content type", path: "/convert", contentType: "-", body: good, want: 415},
		{name: "body over the limit", path: "/mutate", body: big, want: 413, message: "larger than 4096 bytes"},
		{name: "chunked body over the limit", path: "/mutate", body: big, chunked: true, want: 413},
		// A policy's panic is that policy's error, answered by its failure policy, never a
		// crash of the request.
		{name: "panicking validator", server: panics, path: "/validate", body: good, want: 200, message: "Rule/explodes: validation skipped: panic: validator exploded"},
		{name: "panicking converter", server: panics, path: "/convert", body: conversionBody(t, "c", "demo.morph.dev/v2", widget("v1", "a", map[string]any{})), want: 200, message: "with Conversion/widgets: panic: converter exploded"},
		{name: "panicking finalizer", server: finalizerPanics, path: "/mutate", body: good, want: 200, message: "panic-finalizer: panic: finalizer exploded"},
		{name: "unknown path", method: http.MethodGet, path: "/nope", want: 404},
		{name: "content type with charset", path: "/mutate", contentType: "application/json; charset=utf-8", body: good, want: 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := s
			if tt.server != nil {
				srv = tt.server
			}
			method := tt.method
			if method == "" {
				method = http.MethodPost
			}
			var body io.Reader = bytes.NewReader(tt.body)
			if tt.chunked {
				body = io.MultiReader(bytes.NewReader(tt.body)) // no length: sent chunked
			}
			r := httptest.NewRequest(method, tt.path, body)
			if tt.chunked {
				r.ContentLength = -1
			}
			switch tt.contentType {
			case "":
				r.Header.Set("Content-Type", "application/json")
			case "-":
			default:
				r.Header.Set("Content-Type", tt.contentType)
			}
			w := httptest.NewRecorder()
			srv.Handler().ServeHTTP(w, r)
			if w.Code != tt.want || !strings.Contains(w.Body.String(), tt.message) {
				t.Errorf("status %d %q, want %d holding %q", w.Code, w.Body, tt.want, tt.message)
			}
			if tt.want == 405 && w.Header().Get("Allow") == "" {
				t.Error("405 without an Allow header")
			}
		})
	}
	// The server keeps answering after all of that.
	resp := admissionResponse(t, s.Handler(), "/mutate", good)
	if !resp.Allowed || resp.Patch == nil {
		t.Errorf("good review after errors: %+v", resp)
	}
}

func TestDeadlines(t *testing.T) {
	tests := []struct {
		name     string
		mutators []engine.Mutator
		path     string
		allowed  bool
		code     int32
		// message is part of the refusal's message; metric is a line /metrics must show.
		message string
		metric  string
		warning string
		labels  bool
	}{
		{
			name:     "a FailIgnore policy past the request deadline admits the object unchanged",
			mutators: mutators(&labelMutator{name: "slow", key: "x", value: "y", block: true}),
			path:     "/mutate?timeout=200ms",
			allowed:  true,
			warning:  "mutation did not finish in time (Label/slow: stopped: the request's deadline passed (the API server's ?timeout=200ms, less a tenth",
		},
		{
			name: "FailIgnore policies past the request deadline: the object is admitted unchanged",
			mutators: mutators(
				&labelMutator{name: "slow", key: "x", value: "y", block: true},
				&labelMutator{name: "team", key: "team", value: "a"},
			),
			path:    "/mutate?timeout=200ms",
			allowed: true,
			warning: "did not finish in time",
		},
		{
			name:     "a FailClose policy past the request deadline refuses with 504",
			mutators: mutators(&labelMutator{name: "slow", key: "x", value: "y", block: true, failure: engine.FailClose}),
			path:     "/mutate?timeout=200ms",
			code:     504,
			message:  "did not finish in time",
		},
		{
			name: "a FailClose policy past its own deadline refuses with 500 as its error, and the error is counted",
			mutators: mutators(
				&timedMutator{labelMutator: &labelMutator{name: "slow", key: "x", value: "y", block: true, failure: engine.FailClose}, timeout: 20 * time.Millisecond},
			),
			path:    "/mutate?timeout=10s",
			code:    500,
			message: "morph: Label/slow: ",
			metric:  `morph_policy_errors_total{policy="Label/slow"} 1`,
		},
		{
			name: "a policy past its own deadline is skipped; the others still apply",
			mutators: mutators(
				&timedMutator{labelMutator: &labelMutator{name: "slow", key: "x", value: "y", block: true}, timeout: 20 * time.Millisecond},
				&labelMutator{name: "team", key: "team", value: "a"},
			),
			path:    "/mutate?timeout=10s",
			allowed: true,
			warning: "Label/slow skipped",
			labels:  true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newTestServer(t, &policy.Bundle{Mutators: tt.mutators})
			// A real server and a client timeout bound the request (a late answer
			// fails as no answer), rather than a timed assertion.
			resp := admissionResponseOver(t, s.Handler(), tt.path, admissionBody(t, "d", pod(nil)))
			if resp.Allowed != tt.allowed {
				t.Fatalf("allowed = %v, want %v: %+v", resp.Allowed, tt.allowed, resp.Result)
			}
			if !tt.allowed && resp.Result.Code != tt.code {
				t.Errorf("code = %d, want %d", resp.Result.Code, tt.code)
			}
			if tt.message != "" && !strings.Contains(resp.Result.Message, tt.message) {
				t.Errorf("message = %q, want it to contain %q", resp.Result.Message, tt.message)
			}
			if tt.metric != "" && !strings.Contains(get(t, s.Handler(), "/metrics"), tt.metric) {
				t.Errorf("metrics lack %q", tt.metric)
			}
			if tt.warning != "" && (len(resp.Warnings) == 0 || !strings.Contains(strings.Join(resp.Warnings, "\n"), tt.warning)) {
				t.Errorf("warnings %q lack %q", resp.Warnings, tt.warning)
			}
			if (resp.Patch != nil) != tt.labels {
				t.Errorf("patch = %s, want patch: %v", resp.Patch, tt.labels)
			}
		})
	}
}

func TestNotReady(t *testing.T) {
	src := &staticSource{err: errors.New("policies/bad.yaml: document 1 (Assign \"x\"): spec.location: unexpected \"]\"")}
	s, err := New(Options{Source: src, Admission: true, Conversion: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Reload(); err == nil {
		t.Fatal("Reload succeeded with a failing source")
	}
	w := httptest.NewRecorder()
	s.Handler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	var ready Readiness
	if err := json.Unmarshal(w.Body.Bytes(), &ready); err != nil {
		t.Fatal(err)
	}
	if w.Code != http.StatusServiceUnavailable || ready.Ready || !strings.Contains(ready.LastError, "spec.location") || ready.LastErrorAt == nil {
		t.Errorf("readyz = %d %s, want 503 naming the load error", w.Code, w.Body)
	}
	for _, path := range []string{"/mutate", "/validate"} {
		if w := post(t, s.Handler(), path, admissionBody(t, "u", pod(nil))); w.Code != http.StatusServiceUnavailable || !strings.Contains(w.Body.String(), "spec.location") {
			t.Errorf("%s while not ready: %d %s, want 503 with the reason", path, w.Code, w.Body)
		}
	}
	if w := post(t, s.Handler(), "/convert", conversionBody(t, "c", "demo.morph.dev/v2")); w.Code != http.StatusServiceUnavailable {
		t.Errorf("/convert while not ready: %d", w.Code)
	}
	get(t, s.Handler(), "/healthz")
}

func TestEndpointsFollowOptions(t *testing.T) {
	s, err := New(Options{Source: bundleSource(&policy.Bundle{}), Conversion: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	if w := post(t, s.Handler(), "/mutate", admissionBody(t, "u", pod(nil))); w.Code != http.StatusNotFound {
		t.Errorf("/mutate with admission off: %d, want 404", w.Code)
	}
	if _, err := New(Options{Source: bundleSource(&policy.Bundle{})}); err == nil {
		t.Error("a server serving nothing was built")
	}
}

func TestMetricsAndReadiness(t *testing.T) {
	s := newTestServer(t, &policy.Bundle{Mutators: mutators(
		&labelMutator{name: "team", key: "team", value: "a"},
		&labelMutator{name: "broken", key: "b", value: "b", err: errors.New("nope")},
	)})
	admissionResponse(t, s.Handler(), "/mutate", admissionBody(t, "m", pod(nil)))
	post(t, s.Handler(), "/mutate", []byte("{"))
	metrics := get(t, s.Handler(), "/metrics")
	for _, want := range []string{
		`morph_webhook_requests_total{endpoint="mutate",outcome="patched"} 1`,
		`morph_webhook_requests_total{endpoint="mutate",outcome="bad_request"} 1`,
		`morph_webhook_request_duration_seconds_count{endpoint="mutate",outcome="patched"} 1`,
		`morph_mutations_total{policy="Label/team"} 1`,
		`morph_policy_errors_total{policy="Label/broken"} 1`,
		`morph_mutation_passes_count 1`,
		`morph_policy_reloads_total{outcome="success"} 1`,
		`morph_policies{sort="mutators"} 2`,
		`go_goroutines`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	var ready Readiness
	if err := json.Unmarshal([]byte(get(t, s.Handler(), "/readyz")), &ready); err != nil {
		t.Fatal(err)
	}
	if !ready.Ready || ready.Policies == nil || ready.Policies.Mutators != 2 || ready.LoadedAt == nil || ready.LastError != "" {
		t.Errorf("readyz = %+v", ready)
	}
	w := httptest.NewRecorder()
	s.Handler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/katalog/unknown", nil))
	if w.Code != http.StatusNotFound {
		t.Errorf("/katalog/unknown: %d, want 404", w.Code)
	}
}

// TestPolicyPanicIsLoggedWithUID: a validator's panic skips its checks and is logged
// with the request's uid.
func TestPolicyPanicIsLoggedWithUID(t *testing.T) {
	var logs bytes.Buffer
	src := bundleSource(&policy.Bundle{Validators: validators(&labelValidator{name: "explodes", key: "x", panics: true})})
	s, err := New(Options{Source: src, Admission: true, Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	if w := post(t, s.Handler(), "/validate", admissionBody(t, "uid-of-the-panic", pod(nil))); w.Code != http.StatusOK {
		t.Fatalf("status %d, want 200", w.Code)
	}
	var line struct {
		Level, Msg, UID, Error string
	}
	for l := range strings.SplitSeq(strings.TrimSpace(logs.String()), "\n") {
		if err := json.Unmarshal([]byte(l), &line); err != nil {
			t.Fatal(err)
		}
		if line.Msg == "validation skipped" {
			break
		}
	}
	if line.Level != "WARN" || line.UID != "uid-of-the-panic" || !strings.Contains(line.Error, "validator exploded") {
		t.Errorf("log line = %+v, want an error naming the uid and the panic", line)
	}
}

// TestLargeAnswerIsNotChunked: an answer over net/http's 2 KiB buffer still goes out with
// its Content-Length, in one piece, not in chunks.
func TestLargeAnswerIsNotChunked(t *testing.T) {
	s := newTestServer(t, &policy.Bundle{Mutators: mutators(&labelMutator{name: "long", key: "long", value: strings.Repeat("x", 4000)})})
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	resp, err := http.Post(srv.URL+"/mutate", "application/json", bytes.NewReader(admissionBody(t, "big", pod(nil))))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || len(body) < 4000 {
		t.Fatalf("status %d, %d bytes: want a 200 with the long patch", resp.StatusCode, len(body))
	}
	if len(resp.TransferEncoding) > 0 || resp.ContentLength != int64(len(body)) {
		t.Errorf("transfer encoding %v, Content-Length %d for %d bytes: want no chunking and the length", resp.TransferEncoding, resp.ContentLength, len(body))
	}
}

// TestDeclaredLengthDoesNotReserveTheLimit: a Content-Length is a claim, not bytes; the
// buffer reserved before the body arrives is bounded.
func TestDeclaredLengthDoesNotReserveTheLimit(t *testing.T) {
	s := newTestServer(t, &policy.Bundle{})
	r := httptest.NewRequest(http.MethodPost, "/mutate", strings.NewReader("{}"))
	r.ContentLength = 7 << 20
	buf, err := s.readBody(httptest.NewRecorder(), r, 8<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer s.releaseBody(buf)
	body := buf.Bytes()
	if string(body) != "{}" || cap(body) > 2*maxPresize {
		t.Errorf("body %q with capacity %d for a declared 7 MiB: want the 2 bytes in at most %d", body, cap(body), 2*maxPresize)
	}
}
