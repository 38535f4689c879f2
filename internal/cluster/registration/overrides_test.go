package registration

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/morph-dev/morph/internal/engine"
	"github.com/morph-dev/morph/internal/policy"
	"github.com/morph-dev/morph/internal/webhook"
)

func TestOverridesApply(t *testing.T) {
	notIn := func(values ...string) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
			Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpNotIn, Values: values,
		}}}
	}
	ignore, fail := admissionregistrationv1.Ignore, admissionregistrationv1.Fail
	for _, tc := range []struct {
		name        string
		o           Overrides
		failure     *admissionregistrationv1.FailurePolicyType
		sel         *metav1.LabelSelector
		wantFailure admissionregistrationv1.FailurePolicyType
		wantSel     *metav1.LabelSelector
	}{
		{"none", Overrides{}, &fail, notIn("kube-system", "morph-system"), fail, notIn("kube-system", "morph-system")},
		{"failure policy", Overrides{FailurePolicy: ignore}, &fail, notIn("kube-system"), ignore, notIn("kube-system")},
		{"exclusions appended once", Overrides{ExcludeNamespaces: []string{"gatekeeper-system", "kube-system", "kyverno"}}, &ignore,
			notIn("kube-system", "morph-system"), ignore, notIn("kube-system", "morph-system", "gatekeeper-system", "kyverno")},
		{"exclusions without a NotIn term", Overrides{ExcludeNamespaces: []string{"kyverno"}}, &ignore,
			&metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}}, ignore,
			&metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}, MatchExpressions: notIn("kyverno").MatchExpressions}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			failure := tc.failure
			tc.o.apply(&failure, tc.sel)
			if *failure != tc.wantFailure {
				t.Errorf("failurePolicy %s, want %s", *failure, tc.wantFailure)
			}
			if !apiequality.Semantic.DeepEqual(tc.sel, tc.wantSel) {
				t.Errorf("namespaceSelector %+v, want %+v", tc.sel, tc.wantSel)
			}
		})
	}
}

// TestConfigsApplyOverrides: both configurations are written with the overrides, and a
// policy's own failure policy no longer decides the webhook's.
func TestConfigsApplyOverrides(t *testing.T) {
	client := fake.NewClientset()
	policies := &Policies{}
	policies.Loaded(snapshot(&policy.Bundle{
		Mutators:   []engine.Mutator{pods("p"), configMaps("c")},
		Validators: []engine.Validator{validatorOf(configMaps("v"))},
	}))
	c := &Configs{
		Client:    client,
		Options:   webhook.ConfigOptions{Name: "morph", Namespace: "morph-system", URL: "https://127.0.0.1:8443"},
		CA:        ca,
		Policies:  policies,
		Resync:    time.Hour,
		Overrides: Overrides{FailurePolicy: admissionregistrationv1.Ignore, ExcludeNamespaces: []string{"kyverno"}},
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	want := []string{"kube-system", "morph-system", "kyverno"}
	eventually(t, "both configurations carry the overrides", func() error {
		m, err := getMutating(client)
		if err != nil {
			return err
		}
		v, err := client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(context.Background(), "morph", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(m.Webhooks) != 2 || len(v.Webhooks) != 1 {
			return fmt.Errorf("%d mutating and %d validating webhooks", len(m.Webhooks), len(v.Webhooks))
		}
		for _, w := range m.Webhooks {
			if *w.FailurePolicy != admissionregistrationv1.Ignore || !slices.Equal(w.NamespaceSelector.MatchExpressions[0].Values, want) {
				return fmt.Errorf("mutating webhook %s: failurePolicy %s, namespaceSelector %v", w.Name, *w.FailurePolicy, w.NamespaceSelector)
			}
		}
		w := v.Webhooks[0]
		if *w.FailurePolicy != admissionregistrationv1.Ignore || !slices.Equal(w.NamespaceSelector.MatchExpressions[0].Values, want) {
			return fmt.Errorf("validating webhook %s: failurePolicy %s, namespaceSelector %v", w.Name, *w.FailurePolicy, w.NamespaceSelector)
		}
		return nil
	})
}
