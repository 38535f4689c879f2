package e2e

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/morph-dev/morph/test/e2e/controlplane"
)

// WebhookTimeout bounds the wait for a webhook configuration to take effect
// in the API server, and at cleanup for it to stop taking effect.
const WebhookTimeout = 30 * time.Second

// Webhook probing: the API server loads webhook configurations from an
// informer, so a configuration takes effect some time after it was created.
// Each configuration created here therefore gets one extra webhook, named
// probeWebhookName and placed first, that only matches CREATE of ConfigMaps
// in namespace "default" labelled probeLabel=<random token>, and points at a
// probe server of its own. The harness then repeatedly sends a dry-run create
// of such a ConfigMap until the probe server sees it. The API server swaps
// all webhooks of a configuration in at once, so once the probe is called,
// the caller's webhooks are active too. The probe denies the request, which
// stops the mutating chain before any other webhook sees it, and dry-run
// guarantees nothing is ever stored. At cleanup the configuration is deleted
// and the same probe is sent until it is no longer called, so that a later
// test never meets a stale webhook whose server is gone.
const (
	probeWebhookName = "probe.e2e.morph.dev"
	probeLabel       = "e2e.morph.dev/webhook-probe"
)

// StartWebhookServer serves handler over HTTPS on 127.0.0.1 at a random
// port, with a freshly generated CA and a serving certificate for IP
// 127.0.0.1. It returns the base URL ("https://127.0.0.1:<port>"; the handler
// gets every path) and the CA bundle (PEM) for a webhook's clientConfig.
// The server is closed at test cleanup, which then waits (up to 10s) for
// running handler calls to return.
func StartWebhookServer(t testing.TB, handler http.Handler) (url string, caPEM []byte) {
	t.Helper()
	tlsConfig, caPEM, err := controlplane.NewServingTLS("morph-e2e-webhook")
	if err != nil {
		t.Fatalf("webhook server certificates: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("webhook server listen: %v", err)
	}
	// Track handler calls so that cleanup can wait for them: no handler
	// runs after the test is over.
	var inFlight sync.WaitGroup
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			inFlight.Add(1)
			defer inFlight.Done()
			handler.ServeHTTP(w, r)
		}),
		TLSConfig:         tlsConfig,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          log.New(os.Stderr, "e2e webhook server "+ln.Addr().String()+": ", log.LstdFlags),
	}
	served := make(chan error, 1)
	go func() { served <- srv.ServeTLS(ln, "", "") }()
	t.Cleanup(func() {
		// Close rather than Shutdown: the API server keeps HTTP/2
		// connections open, and a graceful HTTP/2 shutdown waits a second
		// per connection. By now the harness has removed the configurations
		// that call this server (their cleanups run first).
		if err := srv.Close(); err != nil {
			t.Errorf("close webhook server %s: %v", ln.Addr(), err)
		}
		if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("webhook server %s: %v", ln.Addr(), err)
		}
		done := make(chan struct{})
		go func() { inFlight.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Errorf("webhook server %s: handler still running 10s after close", ln.Addr())
		}
	})
	return "https://" + ln.Addr().String(), caPEM
}

// RegisterMutatingWebhook creates a MutatingWebhookConfiguration called name
// with one webhook calling url (trusting caPEM) for rules, and returns once
// the API server calls it. The webhook is named name, or name +
// ".e2e.morph.dev" if name has fewer than three dot-separated parts; it has
// failurePolicy (default Fail), sideEffects None, admissionReviewVersions
// [v1], timeoutSeconds 10 and no selectors. Use
// CreateMutatingWebhookConfiguration for anything else. Deleted at cleanup.
func RegisterMutatingWebhook(t testing.TB, name, url string, caPEM []byte, rules []admissionregistrationv1.RuleWithOperations, failurePolicy ...admissionregistrationv1.FailurePolicyType) *admissionregistrationv1.MutatingWebhookConfiguration {
	t.Helper()
	fp := failurePolicyOf(t, failurePolicy)
	return CreateMutatingWebhookConfiguration(t, &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:                    webhookName(name),
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: caPEM},
			Rules:                   rules,
			FailurePolicy:           &fp,
			SideEffects:             ptr(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
			TimeoutSeconds:          ptr(int32(10)),
		}},
	})
}

// RegisterValidatingWebhook is RegisterMutatingWebhook for a
// ValidatingWebhookConfiguration.
func RegisterValidatingWebhook(t testing.TB, name, url string, caPEM []byte, rules []admissionregistrationv1.RuleWithOperations, failurePolicy ...admissionregistrationv1.FailurePolicyType) *admissionregistrationv1.ValidatingWebhookConfiguration {
	t.Helper()
	fp := failurePolicyOf(t, failurePolicy)
	return CreateValidatingWebhookConfiguration(t, &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:                    webhookName(name),
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: caPEM},
			Rules:                   rules,
			FailurePolicy:           &fp,
			SideEffects:             ptr(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
			TimeoutSeconds:          ptr(int32(10)),
		}},
	})
}

// CreateMutatingWebhookConfiguration creates a copy of cfg with the probe
// webhook prepended (see the package's webhook probing comment), waits until
// the API server calls it and deletes it at cleanup, waiting until the API
// server stops calling it.
func CreateMutatingWebhookConfiguration(t testing.TB, cfg *admissionregistrationv1.MutatingWebhookConfiguration) *admissionregistrationv1.MutatingWebhookConfiguration {
	t.Helper()
	c := Current(t)
	p := startProbe(t)
	cfg = cfg.DeepCopy()
	probe := admissionregistrationv1.MutatingWebhook{
		Name:                    probeWebhookName,
		ClientConfig:            p.clientConfig(),
		Rules:                   probeRules(),
		FailurePolicy:           ptr(admissionregistrationv1.Ignore),
		MatchPolicy:             ptr(admissionregistrationv1.Exact),
		NamespaceSelector:       probeNamespaceSelector(),
		ObjectSelector:          p.objectSelector(),
		SideEffects:             ptr(admissionregistrationv1.SideEffectClassNone),
		AdmissionReviewVersions: []string{"v1"},
		TimeoutSeconds:          ptr(int32(5)),
		ReinvocationPolicy:      ptr(admissionregistrationv1.NeverReinvocationPolicy),
	}
	cfg.Webhooks = append([]admissionregistrationv1.MutatingWebhook{probe}, cfg.Webhooks...)
	client := c.Kube.AdmissionregistrationV1().MutatingWebhookConfigurations()
	created, err := client.Create(t.Context(), cfg, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create MutatingWebhookConfiguration %s: %v", cfg.Name, err)
	}
	p.awaitActive(t, c, "MutatingWebhookConfiguration "+created.Name, func(ctx context.Context) error {
		return client.Delete(ctx, created.Name, metav1.DeleteOptions{})
	})
	return created
}

// CreateValidatingWebhookConfiguration is CreateMutatingWebhookConfiguration
// for a ValidatingWebhookConfiguration. Validating webhooks are called in
// parallel, so the caller's validating webhooks may also see probe requests
// (dry-run ConfigMaps in "default" labelled e2e.morph.dev/webhook-probe) if
// their rules match them.
func CreateValidatingWebhookConfiguration(t testing.TB, cfg *admissionregistrationv1.ValidatingWebhookConfiguration) *admissionregistrationv1.ValidatingWebhookConfiguration {
	t.Helper()
	c := Current(t)
	p := startProbe(t)
	cfg = cfg.DeepCopy()
	probe := admissionregistrationv1.ValidatingWebhook{
		Name:                    probeWebhookName,
		ClientConfig:            p.clientConfig(),
		Rules:                   probeRules(),
		FailurePolicy:           ptr(admissionregistrationv1.Ignore),
		MatchPolicy:             ptr(admissionregistrationv1.Exact),
		NamespaceSelector:       probeNamespaceSelector(),
		ObjectSelector:          p.objectSelector(),
		SideEffects:             ptr(admissionregistrationv1.SideEffectClassNone),
		AdmissionReviewVersions: []string{"v1"},
		TimeoutSeconds:          ptr(int32(5)),
	}
	cfg.Webhooks = append([]admissionregistrationv1.ValidatingWebhook{probe}, cfg.Webhooks...)
	client := c.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	created, err := client.Create(t.Context(), cfg, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create ValidatingWebhookConfiguration %s: %v", cfg.Name, err)
	}
	p.awaitActive(t, c, "ValidatingWebhookConfiguration "+created.Name, func(ctx context.Context) error {
		return client.Delete(ctx, created.Name, metav1.DeleteOptions{})
	})
	return created
}

// probeServer is the HTTPS endpoint of one configuration's probe webhook.
type probeServer struct {
	url   string
	ca    []byte
	token string

	mu    sync.Mutex
	calls int
}

func startProbe(t testing.TB) *probeServer {
	t.Helper()
	p := &probeServer{token: strings.ToLower(rand.Text())}
	p.url, p.ca = StartWebhookServer(t, http.HandlerFunc(p.serveHTTP))
	return p
}

// serveHTTP counts requests for its token and denies them.
func (p *probeServer) serveHTTP(w http.ResponseWriter, r *http.Request) {
	var review admissionv1.AdmissionReview
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&review); err != nil || review.Request == nil {
		http.Error(w, fmt.Sprintf("bad AdmissionReview: %v", err), http.StatusBadRequest)
		return
	}
	var obj metav1.PartialObjectMetadata
	if err := json.Unmarshal(review.Request.Object.Raw, &obj); err != nil {
		http.Error(w, fmt.Sprintf("bad object: %v", err), http.StatusBadRequest)
		return
	}
	if obj.Labels[probeLabel] == p.token {
		p.mu.Lock()
		p.calls++
		p.mu.Unlock()
	}
	resp := admissionv1.AdmissionReview{
		TypeMeta: review.TypeMeta,
		Response: &admissionv1.AdmissionResponse{
			UID:     review.Request.UID,
			Allowed: false,
			Result:  &metav1.Status{Code: http.StatusForbidden, Message: "morph e2e webhook probe " + p.token},
		},
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(resp)
}

func (p *probeServer) callCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls
}

func (p *probeServer) clientConfig() admissionregistrationv1.WebhookClientConfig {
	u := p.url + "/probe"
	return admissionregistrationv1.WebhookClientConfig{URL: &u, CABundle: p.ca}
}

func (p *probeServer) objectSelector() *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchLabels: map[string]string{probeLabel: p.token}}
}

func probeNamespaceSelector() *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: metav1.NamespaceDefault}}
}

func probeRules() []admissionregistrationv1.RuleWithOperations {
	return []admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
		Rule: admissionregistrationv1.Rule{
			APIGroups:   []string{""},
			APIVersions: []string{"v1"},
			Resources:   []string{"configmaps"},
			Scope:       ptr(admissionregistrationv1.NamespacedScope),
		},
	}}
}

// send makes one dry-run probe request and reports whether the probe webhook
// was called; err is the API server's answer when it was not.
func (p *probeServer) send(ctx context.Context, c *Cluster) (called bool, err error) {
	before := p.callCount()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		GenerateName: "e2e-webhook-probe-",
		Labels:       map[string]string{probeLabel: p.token},
	}}
	_, err = c.Kube.CoreV1().ConfigMaps(metav1.NamespaceDefault).Create(ctx, cm, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	// The API server waits for the webhook's answer before answering us, so
	// a call has been counted by now.
	return p.callCount() > before, err
}

// awaitActive waits until the probe is called and registers the cleanup that
// deletes the configuration and waits until the probe is no longer called.
func (p *probeServer) awaitActive(t testing.TB, c *Cluster, what string, del func(context.Context) error) {
	t.Helper()
	t.Cleanup(func() {
		ctx, cancel := cleanupContext()
		defer cancel()
		start := time.Now()
		if err := del(ctx); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("cleanup: delete %s: %v", what, err)
			return
		}
		err := poll(ctx, WebhookTimeout, func() error {
			if called, _ := p.send(ctx, c); called {
				return errors.New("the API server still calls its probe webhook")
			}
			return nil
		})
		if err != nil {
			t.Errorf("cleanup: %s still in effect after deletion: %v", what, err)
			return
		}
		t.Logf("cleanup: %s out of effect after %v", what, time.Since(start).Round(time.Millisecond))
	})
	start := time.Now()
	err := poll(t.Context(), WebhookTimeout, func() error {
		called, err := p.send(t.Context(), c)
		switch {
		case called:
			return nil
		case err != nil:
			return fmt.Errorf("probe webhook not called yet; probe request failed: %w", err)
		default:
			return errors.New("probe webhook not called yet (probe request was admitted)")
		}
	})
	if err != nil {
		t.Fatalf("%s did not take effect: %v", what, err)
	}
	t.Logf("%s in effect after %v", what, time.Since(start).Round(time.Millisecond))
}

func failurePolicyOf(t testing.TB, fp []admissionregistrationv1.FailurePolicyType) admissionregistrationv1.FailurePolicyType {
	t.Helper()
	switch len(fp) {
	case 0:
		return admissionregistrationv1.Fail
	case 1:
		return fp[0]
	default:
		t.Fatalf("at most one failure policy, got %v", fp)
		return ""
	}
}

// webhookName makes name a fully qualified webhook name.
func webhookName(name string) string {
	if strings.Count(name, ".") >= 2 {
		return name
	}
	return name + ".e2e.morph.dev"
}

func ptr[T any](v T) *T { return &v }
