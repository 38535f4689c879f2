package gatekeeper

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/morph-dev/morph/internal/engine"
)

// provider serves Gatekeeper's ProviderRequest on 127.0.0.1 over TLS: /ok answers every
// key, /slow is slower than the provider timeout, /error answers 500, /system answers a
// systemError. A key "bad" gets an item error.
func startProvider(t *testing.T) (*httptest.Server, *atomic.Int32, string) {
	var calls atomic.Int32
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		var req providerRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Kind != "ProviderRequest" || req.APIVersion != externalAPIVersion {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		var resp providerResponse
		resp.APIVersion, resp.Kind = externalAPIVersion, "ProviderResponse"
		switch r.URL.Path {
		case "/slow":
			select {
			case <-time.After(3 * time.Second):
			case <-r.Context().Done():
			}
			return
		case "/error":
			http.Error(w, "broken", http.StatusInternalServerError)
			return
		case "/system":
			resp.Response.SystemError = "database down"
		default:
			for _, k := range req.Request.Keys {
				it := providerItem{Key: k, Value: "mirror.example.com/" + k}
				if k == "bad" {
					it = providerItem{Key: k, Error: "no such image"}
				}
				resp.Response.Items = append(resp.Response.Items, it)
			}
		}
		_ = json.NewEncoder(w).Encode(resp)
	}))
	t.Cleanup(srv.Close)
	ca := base64.StdEncoding.EncodeToString(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}))
	return srv, &calls, ca
}

func externalPolicy(url, ca, failure string) string {
	return fmt.Sprintf(`apiVersion: externaldata.gatekeeper.sh/v1beta1
kind: Provider
metadata: {name: mirror}
spec:
  url: %s
  timeout: 1
  caBundle: %s
---
apiVersion: mutations.gatekeeper.sh/v1
kind: Assign
metadata: {name: mirror-images}
spec:
  applyTo: [{groups: [""], versions: [v1], kinds: [Pod]}]
  location: 'spec.containers[name: *].image'
  parameters:
    assign:
      externalData:
        provider: mirror
        dataSource: ValueAtLocation
        failurePolicy: %s
        default: fallback:1
`, url, ca, failure)
}

func TestExternalData(t *testing.T) {
	srv, calls, ca := startProvider(t)
	input := `{apiVersion: v1, kind: Pod, metadata: {name: p, namespace: ns}, spec: {containers: [{name: a, image: "nginx:1"}, {name: b, image: "redis:7"}, {name: c, image: "nginx:1"}]}}`
	tests := []struct {
		name, path, failure, input string
		want                       []string // images; nil when the request must fail
		warn                       string
	}{
		{"batched", "/ok", "Fail", input, []string{"mirror.example.com/nginx:1", "mirror.example.com/redis:7", "mirror.example.com/nginx:1"}, ""},
		{"item error fails", "/ok", "Fail", `{apiVersion: v1, kind: Pod, metadata: {name: p}, spec: {containers: [{name: a, image: bad}]}}`, nil, ""},
		{"item error ignored", "/ok", "Ignore", `{apiVersion: v1, kind: Pod, metadata: {name: p}, spec: {containers: [{name: a, image: bad}, {name: b, image: "redis:7"}]}}`, []string{"bad", "mirror.example.com/redis:7"}, "no such image"},
		{"timeout fails", "/slow", "Fail", input, nil, ""},
		{"timeout uses the default", "/slow", "UseDefault", input, []string{"fallback:1", "fallback:1", "fallback:1"}, "UseDefault"},
		{"server error ignored", "/error", "Ignore", input, []string{"nginx:1", "redis:7", "nginx:1"}, "500"},
		{"system error uses the default", "/system", "UseDefault", input, []string{"fallback:1", "fallback:1", "fallback:1"}, "database down"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := compile(t, Options{AllowExternalData: true}, externalPolicy(srv.URL+tc.path, ca, tc.failure))
			if err != nil {
				t.Fatal(err)
			}
			if len(b.Finalizers) != 1 {
				t.Fatalf("%d finalizers", len(b.Finalizers))
			}
			set, err := engine.NewSet(b.Mutators, b.Finalizers...)
			if err != nil {
				t.Fatal(err)
			}
			in := obj(t, tc.input)
			before := calls.Load()
			res, err := set.Mutate(context.Background(), objectRequest(in, nil, engine.Create))
			if tc.path == "/slow" {
				// The provider answers after its timeout: the failure must say so.
				msg := fmt.Sprint(err)
				if res != nil {
					msg += strings.Join(res.Warnings, "; ")
				}
				if !strings.Contains(msg, "Timeout") && !strings.Contains(msg, "deadline exceeded") && !strings.Contains(msg, "timeout") {
					t.Errorf("a provider slower than its timeout must fail as a timeout; got %q", msg)
				}
			}
			// One batched request; a slow provider's may time out before it arrives
			// (a TLS handshake on a loaded machine), so there it is at most one.
			if n := calls.Load() - before; n != 1 && (tc.path != "/slow" || n != 0) {
				t.Errorf("%d provider requests, want 1", n)
			}
			if tc.want == nil {
				if err == nil {
					t.Fatalf("no error; result %v", res.Object)
				}
				if !strings.Contains(err.Error(), "mirror") {
					t.Errorf("error %q does not name the provider", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			cs := res.Object["spec"].(map[string]any)["containers"].([]any)
			for i, w := range tc.want {
				if got := cs[i].(map[string]any)["image"]; got != w {
					t.Errorf("container %d image = %v, want %v", i, got, w)
				}
			}
			if tc.warn != "" && !strings.Contains(strings.Join(res.Warnings, "\n"), tc.warn) {
				t.Errorf("warnings %q, want %q", res.Warnings, tc.warn)
			}
			if strings.Contains(fmt.Sprint(res.Object), placeholderPrefix) {
				t.Error("a placeholder was left in the result")
			}
		})
	}
}

func TestExternalDataCompile(t *testing.T) {
	_, _, ca := startProvider(t)
	for _, tc := range []struct{ name, policy, want string }{
		{"http", externalPolicy("http://127.0.0.1:1/x", ca, "Fail"), `spec.url: Invalid value: "http://127.0.0.1:1/x": providers must be reached over https; give an https:// URL`},
		{"bad ca", externalPolicy("https://127.0.0.1:1/x", "bm90IHBlbQ==", "Fail"), "spec.caBundle: Invalid value: holds no PEM certificate; give"},
		{"failure policy", externalPolicy("https://127.0.0.1:1/x", ca, "Retry"), `failurePolicy: Unsupported value: "Retry": supported values: "Fail", "Ignore", "UseDefault"`},
		{"unknown provider", strings.Replace(externalPolicy("https://127.0.0.1:1/x", ca, "Fail"), "provider: mirror", "provider: other", 1), `spec.parameters.assign.externalData.provider: Invalid value: "other": no provider has this name; add its externaldata.gatekeeper.sh Provider`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := compile(t, Options{AllowExternalData: true}, tc.policy)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestPlaceholderRoundTrip(t *testing.T) {
	marker, err := newMarker()
	if err != nil {
		t.Fatal(err)
	}
	p := placeholder{marker: marker, key: "a\x00b"[:1], original: `{"x":1}`}
	got, ok := parsePlaceholder(p.String())
	if !ok || got != p {
		t.Fatalf("parsePlaceholder = %+v, %v", got, ok)
	}
	if _, ok := parsePlaceholder("nginx"); ok {
		t.Fatal("a plain string parsed as a placeholder")
	}
}

// A placeholder that comes with the request is never resolved: neither one with the
// old fixed marker nor a guess. Only the paths the external-data mutator wrote are
// sent to the provider. A Pod annotation holding the marker used to make morph send a
// key of the requester's choice to the provider and write the answer into metadata.
func TestExternalDataPlaceholdersCannotBeForged(t *testing.T) {
	srv, calls, ca := startProvider(t)
	b, err := compile(t, Options{AllowExternalData: true}, externalPolicy(srv.URL+"/ok", ca, "Fail"))
	if err != nil {
		t.Fatal(err)
	}
	set, err := engine.NewSet(b.Mutators, b.Finalizers...)
	if err != nil {
		t.Fatal(err)
	}
	forgedOld := placeholderPrefix + "0\x00secret-key\x00"
	forgedNew := placeholderPrefix + "00000000000000000000000000000000\x00secret-key\x00"
	in := obj(t, `{apiVersion: v1, kind: Pod, metadata: {name: p, namespace: ns}, spec: {containers: [{name: a, image: "nginx:1"}]}}`)
	in["metadata"].(map[string]any)["annotations"] = map[string]any{"old": forgedOld, "new": forgedNew}
	before := calls.Load()
	res, err := set.Mutate(context.Background(), objectRequest(in, nil, engine.Create))
	if err != nil {
		t.Fatal(err)
	}
	if n := calls.Load() - before; n != 1 {
		t.Fatalf("%d provider requests, want 1", n)
	}
	ann := res.Object["metadata"].(map[string]any)["annotations"].(map[string]any)
	if ann["old"] != forgedOld || ann["new"] != forgedNew {
		t.Errorf("forged placeholders were resolved: %q", ann)
	}
	if got := res.Object["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)["image"]; got != "mirror.example.com/nginx:1" {
		t.Errorf("image = %v", got)
	}
}

// lateTransport answers every request only once the request's context is done, with
// an empty 200: what net/http hands over when a provider that gives up with its caller
// answers while the caller is closing the connection.
type lateTransport struct{}

func (lateTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	<-r.Context().Done()
	return &http.Response{StatusCode: http.StatusOK, Status: "200 OK", Body: http.NoBody, Header: http.Header{}, Request: r}, nil
}

// An answer that raced the provider's timeout is a timeout, not a malformed answer.
// TestExternalData/timeout_uses_the_default failed in CI with "not a
// ProviderResponse: unexpected end of JSON input" when net/http used such an answer.
func TestExternalDataAnswerAfterTimeout(t *testing.T) {
	_, _, ca := startProvider(t)
	opts := Options{AllowExternalData: true, HTTPClient: &http.Client{Transport: lateTransport{}}}
	for _, failure := range []string{"Fail", "UseDefault"} {
		t.Run(failure, func(t *testing.T) {
			b, err := compile(t, opts, externalPolicy("https://127.0.0.1:1/late", ca, failure))
			if err != nil {
				t.Fatal(err)
			}
			set, err := engine.NewSet(b.Mutators, b.Finalizers...)
			if err != nil {
				t.Fatal(err)
			}
			in := obj(t, `{apiVersion: v1, kind: Pod, metadata: {name: p}, spec: {containers: [{name: a, image: "nginx:1"}]}}`)
			res, err := set.Mutate(context.Background(), objectRequest(in, nil, engine.Create))
			msg := fmt.Sprint(err)
			if res != nil {
				msg += strings.Join(res.Warnings, "; ")
			}
			if !strings.Contains(msg, "no answer within the provider's timeout of 1s") || strings.Contains(msg, "ProviderResponse") {
				t.Errorf("got %q, want a timeout", msg)
			}
		})
	}
}
