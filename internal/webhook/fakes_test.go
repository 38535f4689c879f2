package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/morph-dev/morph/internal/engine"
	"github.com/morph-dev/morph/internal/match"
	"github.com/morph-dev/morph/internal/objects"
	"github.com/morph-dev/morph/internal/policy"
)

var podTarget = engine.Target{Group: "", Version: "v1", Kind: "Pod", Operations: engine.AllOperations}

// labelMutator sets metadata.labels[key] = value, or fails, panics or blocks as told.
type labelMutator struct {
	name       string
	targets    []engine.Target
	failure    engine.FailurePolicy
	reinvoke   engine.Reinvocation
	key, value string
	// nsLabel, when set, makes the mutator match only objects whose Namespace has this
	// label.
	nsLabel string
	err     error
	panics  bool
	// block waits for ctx to end before answering.
	block bool
	// started, when set, receives a value when Mutate starts; sleep delays it.
	started chan struct{}
	sleep   time.Duration
	// flip writes a value that differs every call, so the object never converges.
	flip    bool
	calls   atomic.Int64
	dryRuns atomic.Int64
}

func (m *labelMutator) ID() engine.ID {
	return engine.ID{Dialect: "test", Kind: "Label", Name: m.name}
}

func (m *labelMutator) Targets() []engine.Target {
	if m.targets == nil {
		return []engine.Target{podTarget}
	}
	return m.targets
}
func (m *labelMutator) Reinvocation() engine.Reinvocation   { return m.reinvoke }
func (m *labelMutator) FailurePolicy() engine.FailurePolicy { return m.failure }

func (m *labelMutator) Matches(_ context.Context, req *engine.Request, _ map[string]any) (bool, error) {
	if m.nsLabel == "" {
		return true, nil
	}
	_, ok := match.Labels(req.NamespaceObject)[m.nsLabel]
	return ok, nil
}

func (m *labelMutator) Mutate(ctx context.Context, req *engine.Request, obj map[string]any, w *engine.Writer) (map[string]any, error) {
	n := m.calls.Add(1)
	if req.DryRun {
		m.dryRuns.Add(1)
	}
	if m.started != nil {
		select {
		case m.started <- struct{}{}:
		default:
		}
	}
	time.Sleep(m.sleep)
	switch {
	case m.panics:
		panic("boom from " + m.name)
	case m.block:
		<-ctx.Done()
		return nil, ctx.Err()
	case m.err != nil:
		return nil, m.err
	}
	value := m.value
	if m.flip {
		value = fmt.Sprintf("%s-%d", m.value, n)
	}
	md, _ := obj["metadata"].(map[string]any)
	labels, _ := md["labels"].(map[string]any)
	if labels[m.key] == value {
		return obj, nil
	}
	out := w.Map(obj)
	md = w.Map(md)
	labels = w.Map(labels)
	labels[m.key] = value
	md["labels"] = labels
	out["metadata"] = md
	w.Changed(engine.Pointer("metadata", "labels", m.key))
	return out, nil
}

// fakeMutator is a test mutator; mutators turns fakes into a bundle's mutators.
type fakeMutator interface{ mutator() engine.Mutator }

func mutators(ms ...fakeMutator) []engine.Mutator {
	out := make([]engine.Mutator, len(ms))
	for i, m := range ms {
		out[i] = m.mutator()
	}
	return out
}

func (m *labelMutator) descriptor() engine.Descriptor {
	return engine.Descriptor{ID: m.ID(), Targets: m.Targets(), Reinvocation: m.reinvoke, FailurePolicy: m.failure}
}

func (m *labelMutator) mutator() engine.Mutator {
	return engine.Mutator{Descriptor: m.descriptor(), Mutate: m.mutate}
}

// mutate is Matches, then Mutate.
func (m *labelMutator) mutate(ctx context.Context, req *engine.Request, obj map[string]any, w *engine.Writer) (map[string]any, error) {
	if ok, err := m.Matches(ctx, req, obj); err != nil || !ok {
		return obj, err
	}
	return m.Mutate(ctx, req, obj, w)
}

// timedMutator is a labelMutator with its own deadline.
type timedMutator struct {
	*labelMutator
	timeout time.Duration
}

func (m *timedMutator) mutator() engine.Mutator {
	d := m.descriptor()
	d.Timeout = m.timeout
	return engine.Mutator{Descriptor: d, Mutate: m.mutate}
}

// panicFinalizer panics; the engine turns that into the request's error.
var panicFinalizer = engine.Finalizer{Name: "panic-finalizer", Finalize: func(context.Context, *engine.Request, map[string]any, []engine.Change, *engine.Writer) (map[string]any, error) {
	panic("finalizer exploded")
}}

func finalizers(fs ...engine.Finalizer) []engine.Finalizer { return fs }

// fakeValidator is a test validator; validators turns fakes into a bundle's validators.
type fakeValidator interface{ validator() engine.Validator }

func validators(vs ...fakeValidator) []engine.Validator {
	out := make([]engine.Validator, len(vs))
	for i, v := range vs {
		out[i] = v.validator()
	}
	return out
}

func (v *labelValidator) validator() engine.Validator {
	return engine.Validator{Descriptor: engine.Descriptor{ID: v.ID(), Targets: v.Targets(), FailurePolicy: engine.FailClose}, Validate: v.Validate}
}

// fakeConverter is a test converter; converters turns fakes into a bundle's converters.
type fakeConverter interface{ converter() engine.Converter }

func converters(cs ...fakeConverter) []engine.Converter {
	out := make([]engine.Converter, len(cs))
	for i, c := range cs {
		out[i] = c.converter()
	}
	return out
}

func (c *versionConverter) converter() engine.Converter {
	return engine.Converter{
		Descriptor: engine.Descriptor{ID: c.ID(), Stats: &engine.Stats{Route: "katalog", Entries: func() map[string]any {
			return map[string]any{c.Entry(): c.Stats()}
		}}},
		GroupKind: c.GroupKind(),
		Convert:   c.Convert,
	}
}

// labelValidator reports a violation when the object has the label key.
type labelValidator struct {
	name   string
	key    string
	deny   bool
	err    error
	panics bool
	// late waits for ctx to end, then answers anyway.
	late bool
}

func (v *labelValidator) ID() engine.ID {
	return engine.ID{Dialect: "test", Kind: "Rule", Name: v.name}
}
func (v *labelValidator) Targets() []engine.Target { return []engine.Target{podTarget} }
func (v *labelValidator) Validate(ctx context.Context, _ *engine.Request, obj map[string]any) ([]engine.Violation, error) {
	if v.late {
		<-ctx.Done()
	}
	if v.panics {
		panic("validator exploded")
	}
	if v.err != nil {
		return nil, v.err
	}
	if _, ok := match.Labels(obj)[v.key]; !ok {
		return nil, nil
	}
	return []engine.Violation{{ID: v.ID(), Field: "metadata.labels." + v.key, Message: "label " + v.key + " is not allowed", Deny: v.deny}}, nil
}

// versionConverter converts demo.morph.dev Widgets by rewriting apiVersion and
// renaming spec.size (v1) to spec.replicas (v2) and back.
type versionConverter struct {
	panics bool
	total  atomic.Int64
}

func (c *versionConverter) ID() engine.ID {
	return engine.ID{Dialect: "test", Kind: "Conversion", Name: "widgets"}
}
func (c *versionConverter) GroupKind() schema.GroupKind {
	return schema.GroupKind{Group: "demo.morph.dev", Kind: "Widget"}
}
func (c *versionConverter) Entry() string { return "widget-v2" }
func (c *versionConverter) Stats() any {
	return map[string]any{"conversion": map[string]any{"enabled": true, "total": c.total.Load()}}
}

func (c *versionConverter) Convert(_ context.Context, obj map[string]any, to string) (map[string]any, error) {
	if c.panics {
		panic("converter exploded")
	}
	c.total.Add(1)
	out := engine.DeepCopyMap(obj)
	spec, _ := out["spec"].(map[string]any)
	if spec == nil {
		return nil, errors.New("spec is required")
	}
	switch to {
	case "demo.morph.dev/v2":
		spec["replicas"] = spec["size"]
		delete(spec, "size")
	case "demo.morph.dev/v1":
		spec["size"] = spec["replicas"]
		delete(spec, "replicas")
	default:
		return nil, fmt.Errorf("unknown version %s", to)
	}
	out["apiVersion"] = to
	return out, nil
}

// staticSource serves a snapshot set by the test.
type staticSource struct {
	mu   sync.Mutex
	snap *Snapshot
	err  error
	fp   int
	// fpErr, when set, is the error of Fingerprint (a folder that cannot be read).
	fpErr error
}

func (s *staticSource) Fingerprint() (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fpErr != nil {
		return "", s.fpErr
	}
	return fmt.Sprint(s.fp), nil
}

// set changes the source as a test step says: its fingerprint and the errors of
// Fingerprint and Load.
func (s *staticSource) set(fp int, fpErr, loadErr error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fp, s.fpErr, s.err = fp, fpErr, loadErr
}

func (s *staticSource) Load() (*Snapshot, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.snap, s.err
}

func bundleSource(b *policy.Bundle, namespaces ...map[string]any) *staticSource {
	store := objects.NewStore()
	for _, ns := range namespaces {
		if err := store.Add(ns); err != nil {
			panic(err)
		}
	}
	return &staticSource{snap: &Snapshot{Bundle: b, Namespaces: store}}
}

// newTestServer builds a loaded server for the bundle.
func newTestServer(t testing.TB, b *policy.Bundle, namespaces ...map[string]any) *Server {
	t.Helper()
	s, err := New(Options{Source: bundleSource(b, namespaces...), Admission: true, Conversion: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	return s
}

func pod(labels map[string]any) map[string]any {
	md := map[string]any{"name": "web", "namespace": "apps"}
	if labels != nil {
		md["labels"] = labels
	}
	return map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": md,
		"spec": map[string]any{"containers": []any{map[string]any{"name": "app", "image": "nginx"}}}}
}

type reviewOpt func(*admissionv1.AdmissionRequest)

func dryRun(r *admissionv1.AdmissionRequest) { r.DryRun = new(true) }

func asOperation(op admissionv1.Operation) reviewOpt {
	return func(r *admissionv1.AdmissionRequest) { r.Operation = op }
}

// admissionBody encodes an AdmissionReview for a Pod.
func admissionBody(t testing.TB, uid string, obj map[string]any, opts ...reviewOpt) []byte {
	t.Helper()
	req := &admissionv1.AdmissionRequest{
		UID:       types.UID(uid),
		Kind:      metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
		Resource:  metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
		Operation: admissionv1.Create,
		Namespace: "apps",
		Name:      "web",
	}
	if obj != nil {
		data, err := json.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		req.Object.Raw = data
	}
	for _, o := range opts {
		o(req)
	}
	data, err := json.Marshal(admissionv1.AdmissionReview{TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"}, Request: req})
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func conversionBody(t testing.TB, uid, desired string, objs ...map[string]any) []byte {
	t.Helper()
	req := &apiextensionsv1.ConversionRequest{UID: types.UID(uid), DesiredAPIVersion: desired}
	for _, o := range objs {
		data, err := json.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		req.Objects = append(req.Objects, k8sruntime.RawExtension{Raw: data})
	}
	data, err := json.Marshal(apiextensionsv1.ConversionReview{TypeMeta: metav1.TypeMeta{APIVersion: "apiextensions.k8s.io/v1", Kind: "ConversionReview"}, Request: req})
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// post sends a body to the handler and returns the recorded response.
func post(t testing.TB, h http.Handler, path string, body []byte) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, path, strings.NewReader(string(body)))
	r.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// admissionResponseOver posts a review to h served over HTTP with a client timeout of
// 10 s, and decodes the answer, which must be 200.
func admissionResponseOver(t *testing.T, h http.Handler, path string, body []byte) *admissionv1.AdmissionResponse {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Post(srv.URL+path, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: status %d: %s", path, resp.StatusCode, data)
	}
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(data, &review); err != nil || review.Response == nil {
		t.Fatalf("POST %s: %v: %s", path, err, data)
	}
	return review.Response
}

// admissionResponse posts a review and decodes the answer, which must be 200.
func admissionResponse(t *testing.T, h http.Handler, path string, body []byte) *admissionv1.AdmissionResponse {
	t.Helper()
	w := post(t, h, path, body)
	if w.Code != http.StatusOK {
		t.Fatalf("POST %s: status %d: %s", path, w.Code, w.Body)
	}
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(w.Body.Bytes(), &review); err != nil {
		t.Fatalf("decoding the answer: %v\n%s", err, w.Body)
	}
	if review.APIVersion != "admission.k8s.io/v1" || review.Kind != "AdmissionReview" || review.Response == nil {
		t.Fatalf("answer is not an AdmissionReview with a response: %s", w.Body)
	}
	return review.Response
}
