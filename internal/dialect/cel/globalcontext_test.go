package cel

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// fakeGlobalSource is a GlobalContextSource as the cluster gives one: entries, the
// objects of a resource at a version, and API paths.
type fakeGlobalSource struct {
	entries map[string]map[string]any
	objects map[string][]any // by "group/version/resource/namespace"
	paths   map[string]string
	calls   atomic.Int32
}

func (f *fakeGlobalSource) GlobalContextEntry(_ context.Context, name string) (map[string]any, error) {
	return f.entries[name], nil
}

func (f *fakeGlobalSource) ResourceObjects(_ context.Context, group, version, resource, namespace string) ([]any, error) {
	objs, ok := f.objects[group+"/"+version+"/"+resource+"/"+namespace]
	if !ok {
		return nil, fmt.Errorf("no informer for %s/%s %s", group, version, resource)
	}
	return objs, nil
}

func (f *fakeGlobalSource) APIPath(_ context.Context, method, path string, body []byte) ([]byte, error) {
	f.calls.Add(1)
	if method == http.MethodPost {
		return body, nil
	}
	b, ok := f.paths[path]
	if !ok {
		return nil, fmt.Errorf("the server could not find the requested resource (get %s)", path)
	}
	return []byte(b), nil
}

func entry(name string, spec map[string]any) map[string]any {
	return map[string]any{"apiVersion": "kyverno.io/v2beta1", "kind": "GlobalContextEntry", "metadata": map[string]any{"name": name}, "spec": spec}
}

func projections(kv ...string) []any {
	var out []any
	for i := 0; i < len(kv); i += 2 {
		out = append(out, map[string]any{"name": kv[i], "jmesPath": kv[i+1]})
	}
	return out
}

// TestGlobalContextResolver checks GlobalContextEntries resolved from a source as the
// cluster gives one: kubernetesResource at its version, apiCall urlPath refreshed after
// refreshInterval, apiCall service only to allowed hosts, Kyverno's projections.
func TestGlobalContextResolver(t *testing.T) {
	var served atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		if r.Header.Get("X-Team") != "a" {
			w.WriteHeader(http.StatusForbidden)
			_, _ = w.Write([]byte("no team"))
			return
		}
		_, _ = w.Write([]byte(`{"registries": ["ghcr.io", "quay.io"]}`))
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	src := &fakeGlobalSource{
		entries: map[string]map[string]any{
			"deploys": entry("deploys", map[string]any{
				"kubernetesResource": map[string]any{"group": "apps", "version": "v1", "resource": "deployments", "namespace": "prod"},
				"projections":        projections("names", "[].metadata.name", "upper", "[].to_upper(metadata.name)", "labelled", "[?label_match(`{\"tier\": \"web\"}`, metadata.labels)].metadata.name"),
			}),
			"ns": entry("ns", map[string]any{
				"apiCall":     map[string]any{"urlPath": "/api/v1/namespaces", "refreshInterval": "1m"},
				"projections": projections("count", "length(items)"),
			}),
			"post": entry("post", map[string]any{
				"apiCall": map[string]any{"urlPath": "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", "method": "POST",
					"data": []any{map[string]any{"key": "kind", "value": "SelfSubjectAccessReview"}}},
			}),
			"svc": entry("svc", map[string]any{
				"apiCall":     map[string]any{"service": map[string]any{"url": srv.URL + "/registries", "headers": []any{map[string]any{"key": "X-Team", "value": "a"}}}},
				"projections": projections("first", "split(registries[0], '.')[0]"),
			}),
			"svc-denied": entry("svc-denied", map[string]any{
				"apiCall": map[string]any{"service": map[string]any{"url": srv.URL + "/registries"}},
			}),
			"svc-other": entry("svc-other", map[string]any{
				"apiCall": map[string]any{"service": map[string]any{"url": "http://example.invalid/x"}},
			}),
			"both": entry("both", map[string]any{"apiCall": map[string]any{"urlPath": "/api"}, "kubernetesResource": map[string]any{"version": "v1", "resource": "pods"}}),
		},
		objects: map[string][]any{
			"apps/v1/deployments/prod": {
				map[string]any{"metadata": map[string]any{"name": "web", "labels": map[string]any{"tier": "web"}}},
				map[string]any{"metadata": map[string]any{"name": "db", "labels": map[string]any{"tier": "data"}}},
			},
		},
		paths: map[string]string{"/api/v1/namespaces": `{"kind": "NamespaceList", "items": [{}, {}, {}]}`},
	}
	g := newGlobalResolver(src, newHTTPCaller([]string{u.Host}, 5*time.Second), nil)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	g.now = func() time.Time { return now }
	tests := []struct {
		name, projection string
		want             any
		wantErr          string
	}{
		{name: "deploys", projection: "names", want: []any{"web", "db"}},
		{name: "deploys", projection: "upper", want: []any{"WEB", "DB"}},
		{name: "deploys", projection: "labelled", want: []any{"web"}},
		{name: "deploys", projection: "", want: src.objects["apps/v1/deployments/prod"]},
		{name: "ns", projection: "count", want: float64(3)},
		{name: "post", projection: "", want: map[string]any{"kind": "SelfSubjectAccessReview"}},
		{name: "svc", projection: "first", want: "ghcr"},
		{name: "svc-denied", wantErr: "HTTP 403 Forbidden: no team"},
		{name: "svc-other", wantErr: `host "example.invalid" is not allowed: allow it with --allow-http-host`},
		{name: "both", wantErr: "give either kubernetesResource or apiCall"},
		{name: "missing", want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name+"/"+tt.projection, func(t *testing.T) {
			got, err := g.GetGlobalReference(tt.name, tt.projection)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %#v, want %#v", got, tt.want)
			}
		})
	}

	// An apiCall is answered from the last call until its refreshInterval passed.
	before := src.calls.Load()
	if _, err := g.GetGlobalReference("ns", "count"); err != nil {
		t.Fatal(err)
	}
	if n := src.calls.Load() - before; n != 0 {
		t.Errorf("within refreshInterval: %d new calls, want 0", n)
	}
	src.paths["/api/v1/namespaces"] = `{"items": [{}]}`
	now = now.Add(time.Minute)
	got, err := g.GetGlobalReference("ns", "count")
	if err != nil {
		t.Fatal(err)
	}
	if got != float64(1) || src.calls.Load()-before != 1 {
		t.Errorf("after refreshInterval: got %v with %d calls, want 1 with 1 call", got, src.calls.Load()-before)
	}
	// A dialect built again with the same cache (a reload) does not call again.
	again := newGlobalResolver(src, newHTTPCaller([]string{u.Host}, 5*time.Second), g.calls)
	again.now = g.now
	before = src.calls.Load()
	if _, err := again.GetGlobalReference("ns", "count"); err != nil {
		t.Fatal(err)
	}
	if n := src.calls.Load() - before; n != 0 {
		t.Errorf("after a reload within refreshInterval: %d new calls, want 0", n)
	}
	// A changed entry (a new object, as a store replaces one) is called anew within the
	// refreshInterval; the same object again is not.
	src.entries["ns"] = entry("ns", map[string]any{
		"apiCall":     map[string]any{"urlPath": "/api/v1/namespaces", "refreshInterval": "2m"},
		"projections": projections("count", "length(items)"),
	})
	src.paths["/api/v1/namespaces"] = `{"items": [{}, {}]}`
	before = src.calls.Load()
	for range 2 {
		if got, err = again.GetGlobalReference("ns", "count"); err != nil {
			t.Fatal(err)
		}
	}
	if got != float64(2) || src.calls.Load()-before != 1 {
		t.Errorf("after the entry changed: got %v with %d calls, want 2 with 1 call", got, src.calls.Load()-before)
	}
	if n := served.Load(); n != 2 {
		t.Errorf("the service was called %d times, want 2 (svc, svc-denied; never the host not allowed)", n)
	}
}

// lateTransport answers only once the request's context is done, with an empty 200:
// what net/http hands over when a server answers while the caller is giving up.
type lateTransport struct{}

func (lateTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	<-r.Context().Done()
	return &http.Response{StatusCode: http.StatusOK, Status: "200 OK", Body: http.NoBody, Header: http.Header{}, Request: r}, nil
}

// An apiCall service answer that raced the timeout is a timeout, not an empty body.
func TestGlobalContextServiceAnswerAfterTimeout(t *testing.T) {
	caller := newHTTPCaller([]string{"127.0.0.1:1"}, 50*time.Millisecond)
	caller.client = &http.Client{Transport: lateTransport{}}
	g := newGlobalResolver(&fakeGlobalSource{}, caller, nil)
	_, err := g.service(context.Background(), http.MethodGet, map[string]any{"url": "http://127.0.0.1:1/x"}, nil)
	if err == nil || !strings.Contains(err.Error(), "no answer from http://127.0.0.1:1/x within 50ms") {
		t.Fatalf("err = %v, want a timeout", err)
	}
}
