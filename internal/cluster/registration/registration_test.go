package registration

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsfake "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset/fake"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/morph-dev/morph/internal/engine"
	"github.com/morph-dev/morph/internal/policy"
	"github.com/morph-dev/morph/internal/webhook"
)

// wait bounds every wait of these tests; none asserts a duration.
const wait = 20 * time.Second

func nothing(_ context.Context, _ *engine.Request, obj map[string]any, _ *engine.Writer) (map[string]any, error) {
	return obj, nil
}

// policyOf is a mutator that targets one kind and changes nothing.
func policyOf(name string, target engine.Target, failure engine.FailurePolicy) engine.Mutator {
	return engine.Mutator{
		Descriptor: engine.Descriptor{ID: engine.ID{Dialect: "test", Kind: "Test", Name: name}, Targets: []engine.Target{target}, Reinvocation: engine.ReinvokeNever, FailurePolicy: failure},
		Mutate:     nothing,
	}
}

// validatorOf is a validator with a mutator's descriptor.
func validatorOf(m engine.Mutator) engine.Validator {
	return engine.Validator{Descriptor: m.Descriptor, Validate: func(context.Context, *engine.Request, map[string]any) ([]engine.Violation, error) { return nil, nil }}
}

// converter converts one kind and asks for the caBundle of crd unless it is "".
func converter(gk schema.GroupKind, crd string) engine.Converter {
	return engine.Converter{
		Descriptor: engine.Descriptor{ID: engine.ID{Dialect: "test", Kind: "Conv", Name: gk.String()}},
		GroupKind:  gk, CRD: crd, UpdateCRD: crd != "",
		Convert: func(_ context.Context, obj map[string]any, _ string) (map[string]any, error) { return obj, nil },
	}
}

func pods(name string) engine.Mutator {
	ops, _ := engine.OperationsOf("CREATE")
	return policyOf(name, engine.Target{Version: "v1", Kind: "Pod", Operations: ops}, engine.FailIgnore)
}

func configMaps(name string) engine.Mutator {
	ops, _ := engine.OperationsOf("CREATE", "UPDATE")
	return policyOf(name, engine.Target{Version: "v1", Kind: "ConfigMap", Operations: ops}, engine.FailClose)
}

func snapshot(b *policy.Bundle) *webhook.Snapshot { return &webhook.Snapshot{Bundle: b} }

var ca = StaticCABundle("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")

func startConfigs(t *testing.T, client *fake.Clientset, policies *Policies, bundle CABundle) {
	t.Helper()
	c := &Configs{
		Client:   client,
		Options:  webhook.ConfigOptions{Name: "morph", Namespace: "morph-system", URL: "https://127.0.0.1:8443"},
		CA:       bundle,
		Policies: policies,
		Resync:   time.Hour, // the tests see the watch at work, not the ticker
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

func eventually(t *testing.T, what string, fn func() error) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		err := fn()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %v", what, wait, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func getMutating(client *fake.Clientset) (*admissionregistrationv1.MutatingWebhookConfiguration, error) {
	return client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(context.Background(), "morph", metav1.GetOptions{})
}

func resources(w []admissionregistrationv1.MutatingWebhook) []string {
	var out []string
	for _, h := range w {
		for _, r := range h.Rules {
			out = append(out, fmt.Sprint(r.Resources))
		}
	}
	return out
}

func TestConfigsWaitForThePoliciesAndTheCA(t *testing.T) {
	client := fake.NewClientset()
	policies := &Policies{}
	pending := &switchableCA{}
	startConfigs(t, client, policies, pending)
	// Nothing is registered before the policies loaded, nor before the CA is known.
	policies.Loaded(snapshot(&policy.Bundle{Mutators: []engine.Mutator{pods("p")}}))
	time.Sleep(100 * time.Millisecond) // give a wrong implementation the chance to write
	if _, err := getMutating(client); !apierrors.IsNotFound(err) {
		t.Fatalf("a configuration was written before the CA bundle was known: %v", err)
	}
	pending.set(ca)
	policies.Loaded(policies.Current()) // what the certificate store's Wake does
	eventually(t, "the configuration is created", func() error {
		m, err := getMutating(client)
		if err != nil {
			return err
		}
		if string(m.Webhooks[0].ClientConfig.CABundle) != string(ca) {
			return fmt.Errorf("caBundle %q", m.Webhooks[0].ClientConfig.CABundle)
		}
		return nil
	})
}

type switchableCA struct{ b atomic.Pointer[[]byte] }

func (s *switchableCA) set(b []byte) { s.b.Store(&b) }
func (s *switchableCA) CABundle() ([]byte, bool) {
	if b := s.b.Load(); b != nil {
		return *b, true
	}
	return nil, false
}

func TestConfigsFollowThePoliciesAndRevertHandEdits(t *testing.T) {
	client := fake.NewClientset()
	policies := &Policies{}
	policies.Loaded(snapshot(&policy.Bundle{
		Mutators:   []engine.Mutator{pods("p"), configMaps("c")},
		Validators: []engine.Validator{validatorOf(configMaps("v"))},
	}))
	startConfigs(t, client, policies, ca)
	eventually(t, "both configurations are created", func() error {
		m, err := getMutating(client)
		if err != nil {
			return err
		}
		if len(m.Webhooks) != 2 || m.Labels["app.kubernetes.io/managed-by"] != "morph" {
			return fmt.Errorf("%d webhooks, labels %v", len(m.Webhooks), m.Labels)
		}
		w := m.Webhooks[0]
		if *w.SideEffects != admissionregistrationv1.SideEffectClassNone || *w.MatchPolicy != admissionregistrationv1.Equivalent ||
			w.NamespaceSelector.MatchExpressions[0].Values[1] != "morph-system" || !strings.HasPrefix(*w.ClientConfig.URL, "https://127.0.0.1:8443/mutate/") {
			return fmt.Errorf("webhook %+v", w)
		}
		_, err = client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(context.Background(), "morph", metav1.GetOptions{})
		return err
	})

	// A hand edit is put back.
	m, _ := getMutating(client)
	edited := m.DeepCopy()
	edited.Webhooks = edited.Webhooks[:1]
	edited.Webhooks[0].Rules[0].Resources = []string{"secrets"}
	delete(edited.Labels, "app.kubernetes.io/managed-by")
	if _, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Update(context.Background(), edited, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the hand edit is reverted", func() error {
		m, err := getMutating(client)
		if err != nil {
			return err
		}
		if got := resources(m.Webhooks); len(got) != 2 || got[0] != "[configmaps]" || got[1] != "[pods]" || m.Labels["app.kubernetes.io/managed-by"] != "morph" {
			return fmt.Errorf("resources %v labels %v", got, m.Labels)
		}
		return nil
	})

	// A deleted policy narrows the rules; no validator left deletes the validating
	// configuration.
	policies.Loaded(snapshot(&policy.Bundle{Mutators: []engine.Mutator{pods("p")}}))
	eventually(t, "the rules narrow", func() error {
		m, err := getMutating(client)
		if err != nil {
			return err
		}
		if got := resources(m.Webhooks); len(got) != 1 || got[0] != "[pods]" {
			return fmt.Errorf("resources %v", got)
		}
		_, err = client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(context.Background(), "morph", metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("validating configuration still there (%v)", err)
		}
		return nil
	})

	// A deleted configuration is created again.
	if err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(context.Background(), "morph", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the deleted configuration comes back", func() error { _, err := getMutating(client); return err })

	// No policy: no configuration.
	policies.Loaded(snapshot(&policy.Bundle{}))
	eventually(t, "the configuration is deleted", func() error {
		if _, err := getMutating(client); !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there (%v)", err)
		}
		return nil
	})
}

func TestConfigsWriteNothingWhenInSync(t *testing.T) {
	client := fake.NewClientset()
	policies := &Policies{}
	policies.Loaded(snapshot(&policy.Bundle{Mutators: []engine.Mutator{pods("p")}}))
	startConfigs(t, client, policies, ca)
	eventually(t, "the configuration is created", func() error { _, err := getMutating(client); return err })
	// Simulate the API server's defaulting of objectSelector, then reconcile again.
	m, _ := getMutating(client)
	for i := range m.Webhooks {
		if m.Webhooks[i].ObjectSelector == nil {
			t.Errorf("webhook %s has no objectSelector; the API server defaults it to {} and a diff would loop", m.Webhooks[i].Name)
		}
	}
	// Until the informer saw the create, a reconcile may create again (and fail with
	// AlreadyExists); once it saw it, a reconcile writes nothing. A diff between what
	// is written and what is read back would write on every round.
	eventually(t, "a reconcile that writes nothing", func() error {
		client.ClearActions()
		policies.Loaded(policies.Current())
		time.Sleep(200 * time.Millisecond)
		for _, a := range client.Actions() {
			if v := a.GetVerb(); v != "list" && v != "watch" && v != "get" {
				return fmt.Errorf("in sync, the reconciler wrote: %s %s", v, a.GetResource().Resource)
			}
		}
		return nil
	})
}

func crd(name string, webhookConversion bool, bundle []byte) *apiextensionsv1.CustomResourceDefinition {
	c := &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: "1"}}
	if webhookConversion {
		url := "https://127.0.0.1:8443/convert"
		c.Spec.Conversion = &apiextensionsv1.CustomResourceConversion{
			Strategy: apiextensionsv1.WebhookConverter,
			Webhook: &apiextensionsv1.WebhookConversion{
				ClientConfig:             &apiextensionsv1.WebhookClientConfig{URL: &url, CABundle: bundle},
				ConversionReviewVersions: []string{"v1"},
			},
		}
	}
	return c
}

func TestCRDCABundles(t *testing.T) {
	client := apiextensionsfake.NewClientset(
		crd("cronjobs.demo.orkestra.io", true, nil),
		crd("others.demo.orkestra.io", true, []byte("someone else's")),
		crd("plain.demo.orkestra.io", false, nil),
	)
	policies := &Policies{}
	policies.Loaded(snapshot(&policy.Bundle{Converters: []engine.Converter{
		converter(schema.GroupKind{Group: "demo.orkestra.io", Kind: "CronJob"}, "cronjobs.demo.orkestra.io"),
		converter(schema.GroupKind{Group: "demo.orkestra.io", Kind: "Plain"}, "plain.demo.orkestra.io"),
		converter(schema.GroupKind{Group: "demo.orkestra.io", Kind: "Missing"}, "missing.demo.orkestra.io"),
		converter(schema.GroupKind{Group: "demo.orkestra.io", Kind: "Other"}, ""),
	}}))
	c := &CRDCABundles{Client: client, CA: ca, Policies: policies, Resync: time.Hour}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	defer func() { cancel(); <-done }()

	get := func(name string) *apiextensionsv1.CustomResourceDefinition {
		got, err := client.ApiextensionsV1().CustomResourceDefinitions().Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	eventually(t, "the caBundle is patched", func() error {
		if got := get("cronjobs.demo.orkestra.io").Spec.Conversion.Webhook.ClientConfig.CABundle; string(got) != string(ca) {
			return fmt.Errorf("caBundle %q", got)
		}
		return nil
	})
	// An external change is put back (the watch).
	changed := get("cronjobs.demo.orkestra.io")
	changed.Spec.Conversion.Webhook.ClientConfig.CABundle = nil
	if _, err := client.ApiextensionsV1().CustomResourceDefinitions().Update(context.Background(), changed, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a removed caBundle is restored", func() error {
		if got := get("cronjobs.demo.orkestra.io").Spec.Conversion.Webhook.ClientConfig.CABundle; string(got) != string(ca) {
			return fmt.Errorf("caBundle %q", got)
		}
		return nil
	})
	if got := get("others.demo.orkestra.io").Spec.Conversion.Webhook.ClientConfig.CABundle; string(got) != "someone else's" {
		t.Errorf("a CRD no converter asked for was patched: %q", got)
	}
	if conv := get("plain.demo.orkestra.io").Spec.Conversion; conv != nil {
		t.Errorf("a CRD without webhook conversion was given one: %+v", conv)
	}
	// A CRD created later gets its caBundle.
	if _, err := client.ApiextensionsV1().CustomResourceDefinitions().Create(context.Background(), crd("missing.demo.orkestra.io", true, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a CRD created later is patched", func() error {
		if got := get("missing.demo.orkestra.io").Spec.Conversion.Webhook.ClientConfig.CABundle; string(got) != string(ca) {
			return fmt.Errorf("caBundle %q", got)
		}
		return nil
	})
}

// TestCRDCABundlesWatchOnlyWhenWanted: no CRD is listed or watched while no loaded
// policy asks for a caBundle; the first one that does starts the watch.
func TestCRDCABundlesWatchOnlyWhenWanted(t *testing.T) {
	client := apiextensionsfake.NewClientset(crd("cronjobs.demo.orkestra.io", true, nil))
	policies := &Policies{}
	policies.Loaded(snapshot(&policy.Bundle{})) // no converter
	c := &CRDCABundles{Client: client, CA: ca, Policies: policies, Resync: time.Hour}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	defer func() { cancel(); <-done }()
	reads := func() int {
		n := 0
		for _, a := range client.Actions() {
			if a.GetVerb() == "list" || a.GetVerb() == "watch" {
				n++
			}
		}
		return n
	}
	// Another snapshot without converters: still nothing watched.
	policies.Loaded(snapshot(&policy.Bundle{}))
	time.Sleep(100 * time.Millisecond) // gives a wrongly started informer time to list
	if n := reads(); n != 0 {
		t.Fatalf("%d lists or watches of CRDs while no policy wants a caBundle", n)
	}
	policies.Loaded(snapshot(&policy.Bundle{Converters: []engine.Converter{
		converter(schema.GroupKind{Group: "demo.orkestra.io", Kind: "CronJob"}, "cronjobs.demo.orkestra.io"),
	}}))
	eventually(t, "the caBundle is patched once wanted", func() error {
		got, err := client.ApiextensionsV1().CustomResourceDefinitions().Get(context.Background(), "cronjobs.demo.orkestra.io", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if string(got.Spec.Conversion.Webhook.ClientConfig.CABundle) != string(ca) {
			return fmt.Errorf("caBundle %q", got.Spec.Conversion.Webhook.ClientConfig.CABundle)
		}
		return nil
	})
	if reads() == 0 {
		t.Error("the caBundle was patched without a CRD watch")
	}
}

func TestWantedCRDs(t *testing.T) {
	b := &policy.Bundle{Converters: []engine.Converter{
		converter(schema.GroupKind{Kind: "A"}, "b.x"),
		converter(schema.GroupKind{Kind: "B"}, "a.x"),
		converter(schema.GroupKind{Kind: "C"}, "a.x"),
	}}
	if got := WantedCRDs(b); fmt.Sprint(got) != "[a.x b.x]" {
		t.Errorf("WantedCRDs = %v", got)
	}
}
