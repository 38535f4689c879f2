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

func TestParseImage(t *testing.T) {
	tests := []struct {
		in                                    string
		registry, repository, tag, digest, id string
		wantErr                               bool
	}{
		{in: "nginx", registry: "docker.io", repository: "library/nginx", tag: "latest", id: "latest"},
		{in: "nginx:1.25", registry: "docker.io", repository: "library/nginx", tag: "1.25", id: "1.25"},
		{in: "acme/app:v1", registry: "docker.io", repository: "acme/app", tag: "v1", id: "v1"},
		{in: "ghcr.io/acme/proxy:v2", registry: "ghcr.io", repository: "acme/proxy", tag: "v2", id: "v2"},
		{in: "localhost:5000/app", registry: "localhost:5000", repository: "app", tag: "latest", id: "latest"},
		{in: "localhost/app:1", registry: "localhost", repository: "app", tag: "1", id: "1"},
		{
			in: "ghcr.io/a/b@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", registry: "ghcr.io", repository: "a/b",
			digest: "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", id: "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
		},
		{
			in: "nginx:1.25@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", registry: "docker.io", repository: "library/nginx", tag: "1.25",
			digest: "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", id: "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
		},
		{in: "", wantErr: true},
		{in: "Nginx", wantErr: true},
		{in: "nginx:", wantErr: true},
		{in: "nginx@sha256:xyz", wantErr: true},
		{in: "a//b", wantErr: true},
		{in: "not an image", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			r, err := parseImage(tt.in)
			if (err != nil) != tt.wantErr {
				t.Fatalf("parseImage(%q) error = %v, want error %v", tt.in, err, tt.wantErr)
			}
			if tt.wantErr {
				return
			}
			if r.Registry != tt.registry || r.Repository != tt.repository || r.Tag != tt.tag || r.Digest != tt.digest || r.Identifier() != tt.id {
				t.Errorf("parseImage(%q) = %+v (identifier %q)", tt.in, r, r.Identifier())
			}
		})
	}
}

// FuzzParseImage checks that parsing never panics and that a parsed reference prints to
// a reference that parses to the same parts.
func FuzzParseImage(f *testing.F) {
	for _, s := range []string{"nginx", "ghcr.io/a/b:v1", "localhost:5000/x@sha256:0123456789abcdef0123456789abcdef", "a:b:c", "@", ":"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := parseImage(s)
		if err != nil {
			return
		}
		again, err := parseImage(r.String())
		if err != nil {
			t.Fatalf("%q parsed to %+v whose form %q does not parse: %v", s, r, r.String(), err)
		}
		if again != r {
			t.Fatalf("%q: %+v, then %+v", s, r, again)
		}
	})
}

func TestParseServiceAccount(t *testing.T) {
	tests := []struct{ user, ns, name string }{
		{"system:serviceaccount:team:builder", "team", "builder"},
		{"system:serviceaccount:team", "", ""},
		{"system:serviceaccount::x", "", ""},
		{"system:serviceaccount:a:b:c", "", ""},
		{"alice", "", ""},
	}
	for _, tt := range tests {
		ns, name := parseServiceAccount(tt.user)
		if ns != tt.ns || name != tt.name {
			t.Errorf("parseServiceAccount(%q) = %q, %q; want %q, %q", tt.user, ns, name, tt.ns, tt.name)
		}
	}
}

func FuzzParseServiceAccount(f *testing.F) {
	f.Add("system:serviceaccount:team:builder")
	f.Fuzz(func(t *testing.T, s string) {
		ns, name := parseServiceAccount(s)
		if (ns == "") != (name == "") {
			t.Fatalf("%q: namespace %q, name %q", s, ns, name)
		}
		if ns != "" && "system:serviceaccount:"+ns+":"+name != s {
			t.Fatalf("%q does not round-trip", s)
		}
	})
}

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
		{expr: `resource.Get("v1", "configmaps", "default", "zz").metadata.name`, wantErr: "ConfigMap default/zz not found: pass it with --context"},
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
