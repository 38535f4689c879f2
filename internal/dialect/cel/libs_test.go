package cel

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/morph-dev/morph/internal/engine"
	"github.com/morph-dev/morph/internal/objects"
	"github.com/morph-dev/morph/internal/policy"
)

const httpPolicy = `apiVersion: policies.kyverno.io/v1alpha1
kind: MutatingPolicy
metadata:
  name: add-external-team-labels
spec:
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: ["v1"]
      resources: ["pods"]
      operations: ["CREATE", "UPDATE"]
  variables:
  - name: externalData
    expression: >-
      http.Get("URL")
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: |
        Object{
          metadata: Object.metadata{
            labels: {"external-team": string(variables.externalData.metadata.team)}
          }
        }
`

func testPod() map[string]any {
	return map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": "web", "namespace": "default"},
		"spec":     map[string]any{"containers": []any{map[string]any{"name": "nginx", "image": "nginx:1.25"}}},
	}
}

func mutateOnce(t *testing.T, d policy.Dialect, policyYAML string, obj map[string]any) (*engine.Result, error) {
	t.Helper()
	docs, err := policy.Decode("policy.yaml", []byte(policyYAML))
	if err != nil {
		t.Fatal(err)
	}
	b, err := d.Compile(docs)
	if err != nil {
		t.Fatal(err)
	}
	set, err := engine.NewSet(b.Mutators)
	if err != nil {
		t.Fatal(err)
	}
	return set.Mutate(context.Background(), &engine.Request{
		Kind: podGVK, Operation: engine.Create, Namespace: "default", Name: "web", Object: obj,
	})
}

// TestHTTPLibrary runs the spec's HTTP example against a server on 127.0.0.1.
func TestHTTPLibrary(t *testing.T) {
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		switch r.URL.Path {
		case "/big":
			w.Write([]byte(`{"metadata":{"team":"` + strings.Repeat("x", maxHTTPBody) + `"}}`))
		case "/slow":
			time.Sleep(300 * time.Millisecond)
			fallthrough
		default:
			json.NewEncoder(w).Encode(map[string]any{"metadata": map[string]any{"team": "platform"}})
		}
	}))
	defer srv.Close()
	host := mustHost(t, srv.URL)
	tests := []struct {
		name    string
		allow   []string
		path    string
		timeout time.Duration
		want    string
		wantErr string
	}{
		{name: "allowed host", allow: []string{host}, path: "/team", want: "platform"},
		{name: "off by default", path: "/team", wantErr: "http: calls are off: allow the host " + strconv.Quote(host) + " with --allow-http-host"},
		{name: "host not allowed", allow: []string{"example.invalid"}, path: "/team", wantErr: "is not allowed: allow it with --allow-http-host"},
		{name: "response too large", allow: []string{host}, path: "/big", wantErr: "larger than 2097152 bytes"},
		{name: "timeout", allow: []string{host}, path: "/slow", timeout: 50 * time.Millisecond, wantErr: "deadline exceeded"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := New(Options{HTTPAllowHosts: tt.allow, HTTPTimeout: tt.timeout})
			res, err := mutateOnce(t, d, strings.Replace(httpPolicy, "URL", srv.URL+tt.path, 1), testPod())
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := res.Object["metadata"].(map[string]any)["labels"].(map[string]any)["external-team"]
			if got != tt.want {
				t.Errorf("label = %v, want %q", got, tt.want)
			}
		})
	}
	if calls.Load() == 0 {
		t.Error("the server was never called")
	}
}

func mustHost(t *testing.T, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

func TestResourceListAndErrors(t *testing.T) {
	store := objects.NewStore()
	for _, cm := range []string{"a", "b"} {
		if err := store.Add(map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": cm, "namespace": "default"}}); err != nil {
			t.Fatal(err)
		}
	}
	const pol = `apiVersion: policies.kyverno.io/v1
kind: MutatingPolicy
metadata:
  name: count
spec:
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: ["v1"]
      resources: ["pods"]
      operations: ["CREATE"]
  mutations:
  - patchType: JSONPatch
    jsonPatch:
      expression: '[JSONPatch{op: "add", path: "/metadata/labels", value: {"configmaps": string(EXPR)}}]'
`
	tests := []struct{ expr, want, wantErr string }{
		{expr: `resource.List("v1", "configmaps", "default").items.size()`, want: "2"},
		{expr: `resource.List("v1", "configmaps", "other").items.size()`, want: "0"},
		{expr: `resource.Get("v1", "configmaps", "default", "b").metadata.name`, want: "b"},
		{expr: `type(resource.Get("v1", "configmaps", "default", "zz")) == null_type`, want: "true"},
		{expr: `resource.Get("example.com/v1", "widgets", "default", "w").metadata.name`, wantErr: "pass its CustomResourceDefinition with --context"},
	}
	for _, tt := range tests {
		t.Run(tt.expr, func(t *testing.T) {
			res, err := mutateOnce(t, New(Options{Objects: store}), strings.Replace(pol, "EXPR", tt.expr, 1), testPod())
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := res.Object["metadata"].(map[string]any)["labels"].(map[string]any)["configmaps"]; got != tt.want {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

// TestTimeoutSecondsIsTheDeadline: a library call slower than the policy's
// webhookConfiguration.timeoutSeconds ends the evaluation at the deadline, though the
// call itself (bounded by HTTPTimeout) would go on.
func TestTimeoutSecondsIsTheDeadline(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
		json.NewEncoder(w).Encode(map[string]any{"metadata": map[string]any{"team": "late"}})
	}))
	defer srv.Close()
	defer close(release)
	policy := strings.Replace(httpPolicy, "URL", srv.URL+"/slow", 1)
	policy = strings.Replace(policy, "spec:\n", "spec:\n  webhookConfiguration:\n    timeoutSeconds: 1\n", 1)
	d := New(Options{HTTPAllowHosts: []string{mustHost(t, srv.URL)}, HTTPTimeout: 30 * time.Second})
	_, err := mutateOnce(t, d, policy, testPod())
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "within 1s (webhookConfiguration.timeoutSeconds)") {
		t.Fatalf("error = %v, want the policy's 1s deadline", err)
	}
}
