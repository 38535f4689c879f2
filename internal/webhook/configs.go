package webhook

import (
	"cmp"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"github.com/morph-dev/morph/internal/engine"
	"github.com/morph-dev/morph/internal/policy"
)

// Webhook configuration defaults.
const (
	// DefaultTimeoutSeconds is the webhook timeout when no policy asks for one (the
	// Kubernetes default).
	DefaultTimeoutSeconds = 10
	// MaxTimeoutSeconds is the largest timeout Kubernetes accepts.
	MaxTimeoutSeconds = 30
)

// ServiceRef names the Service in front of the webhook server.
type ServiceRef struct {
	Namespace, Name string
	Port            int32
}

// ConfigOptions say how the API server reaches the webhook server.
type ConfigOptions struct {
	// Name of the configurations (DNS label), also part of every webhook's name.
	Name string
	// Namespace is where morph runs; it is excluded from admission, as is kube-system.
	Namespace string
	// URL is the server's base address (https://host:port); exclusive with Service.
	URL string
	// Service is the Service in front of the server; exclusive with URL.
	Service *ServiceRef
	// CABundle is the PEM CA that signed the serving certificate (may be empty when the
	// certificate chains to a root the API server trusts).
	CABundle []byte
}

func (o *ConfigOptions) check() error {
	if errs := validation.IsDNS1123Label(o.Name); len(errs) > 0 {
		return fmt.Errorf("--name %q: %s", o.Name, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Label(o.Namespace); len(errs) > 0 {
		return fmt.Errorf("--namespace %q: %s", o.Namespace, strings.Join(errs, "; "))
	}
	switch {
	case o.URL != "" && o.Service != nil:
		return errors.New("give either --url or --service, not both")
	case o.URL == "" && o.Service == nil:
		return errors.New("give --url https://HOST:PORT or --service NAMESPACE/NAME to say how the API server reaches morph")
	case o.URL != "":
		u, err := url.Parse(o.URL)
		if err != nil {
			return fmt.Errorf("--url: %w", err)
		}
		if u.Scheme != "https" || u.Host == "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
			return fmt.Errorf("--url %q: use https://HOST:PORT (the API server calls webhooks over HTTPS only)", o.URL)
		}
	}
	return nil
}

// webhookGroup is the policies one webhook serves.
type webhookGroup struct {
	timeout    int32
	failure    engine.FailurePolicy
	reinvoke   engine.Reinvocation
	validating bool
	rules      map[ruleKey]map[string]bool // resources by group, version and operations
	// first is the group's first policy in the engine's order: groups are listed (and
	// so called by the API server) in the order of their first policies.
	first engine.ID
}

type groupKey struct {
	timeout    int32
	failure    engine.FailurePolicy
	reinvoke   engine.Reinvocation
	validating bool
}

type ruleKey struct {
	group, version string
	ops            engine.OperationSet
}

// Configurations returns the webhook configurations that send the bundle's requests to
// the server: a MutatingWebhookConfiguration when there are mutators and a
// ValidatingWebhookConfiguration when there are validators (each nil otherwise).
//
// Policies are grouped by what the API server must know per webhook: timeout, failure
// policy and (for mutation) reinvocation policy. Each group is one webhook whose rules
// are its policies' targets, calling the group's own path (/mutate/<group>,
// /validate/<group>; see MutationGroup), where the server runs that group's policies
// only: an Ignore group's slow policy then never fails an object through a Fail group's
// webhook, and a Fail group's policy always runs under its own webhook's failure policy.
func Configurations(b *policy.Bundle, o ConfigOptions) (*admissionregistrationv1.MutatingWebhookConfiguration, *admissionregistrationv1.ValidatingWebhookConfiguration, error) {
	if err := o.check(); err != nil {
		return nil, nil, err
	}
	var mutating *admissionregistrationv1.MutatingWebhookConfiguration
	if groups := mutatingGroups(b.Mutators); len(groups) > 0 {
		mutating = &admissionregistrationv1.MutatingWebhookConfiguration{
			TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "MutatingWebhookConfiguration"},
			ObjectMeta: configMeta(o.Name),
		}
		for _, g := range groups {
			name := fmt.Sprintf("mutate-%s.%s.morph.dev", g.name(), o.Name)
			reinvoke := admissionregistrationv1.NeverReinvocationPolicy
			if g.reinvoke == engine.ReinvokeIfNeeded {
				reinvoke = admissionregistrationv1.IfNeededReinvocationPolicy
			}
			mutating.Webhooks = append(mutating.Webhooks, admissionregistrationv1.MutatingWebhook{
				Name:                    name,
				ClientConfig:            clientConfig(o, "/mutate/"+g.name()),
				Rules:                   g.ruleList(),
				FailurePolicy:           new(failureType(g.failure)),
				MatchPolicy:             new(admissionregistrationv1.Equivalent),
				NamespaceSelector:       namespaceSelector(o.Namespace),
				SideEffects:             new(admissionregistrationv1.SideEffectClassNone),
				TimeoutSeconds:          new(g.timeout),
				AdmissionReviewVersions: []string{"v1"},
				ReinvocationPolicy:      &reinvoke,
			})
		}
	}
	var validating *admissionregistrationv1.ValidatingWebhookConfiguration
	if groups := validatingGroups(b.Validators); len(groups) > 0 {
		validating = &admissionregistrationv1.ValidatingWebhookConfiguration{
			TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingWebhookConfiguration"},
			ObjectMeta: configMeta(o.Name),
		}
		for _, g := range groups {
			validating.Webhooks = append(validating.Webhooks, admissionregistrationv1.ValidatingWebhook{
				Name:                    fmt.Sprintf("validate-%s.%s.morph.dev", g.name(), o.Name),
				ClientConfig:            clientConfig(o, "/validate/"+g.name()),
				Rules:                   g.ruleList(),
				FailurePolicy:           new(failureType(g.failure)),
				MatchPolicy:             new(admissionregistrationv1.Equivalent),
				NamespaceSelector:       namespaceSelector(o.Namespace),
				SideEffects:             new(admissionregistrationv1.SideEffectClassNone),
				TimeoutSeconds:          new(g.timeout),
				AdmissionReviewVersions: []string{"v1"},
			})
		}
	}
	return mutating, validating, nil
}

func configMeta(name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Labels: map[string]string{"app.kubernetes.io/managed-by": "morph"}}
}

// MutationGroup names the webhook group of a mutating policy: its failure policy, its
// reinvocation as a webhook can say it, and its timeout in seconds, such as
// "fail-ifneeded-10s". The webhook of the group calls /mutate/<group>.
func MutationGroup(d engine.Descriptor) string {
	return groupKey{timeout: timeoutSeconds(d), failure: d.FailurePolicy, reinvoke: webhookReinvocation(d.Reinvocation)}.name()
}

// ValidationGroup names the webhook group of a validating policy, such as
// "fail-10s". The webhook of the group calls /validate/<group>.
func ValidationGroup(d engine.Descriptor) string {
	return validationKey(d).name()
}

func validationKey(d engine.Descriptor) groupKey {
	return groupKey{timeout: timeoutSeconds(d), failure: d.FailurePolicy, reinvoke: engine.ReinvokeNever, validating: true}
}

func (k groupKey) name() string {
	if k.validating {
		return fmt.Sprintf("%s-%ds", failureName(k.failure), k.timeout)
	}
	return fmt.Sprintf("%s-%s-%ds", failureName(k.failure), reinvocationName(k.reinvoke), k.timeout)
}

func (g *webhookGroup) name() string {
	return groupKey{timeout: g.timeout, failure: g.failure, reinvoke: g.reinvoke, validating: g.validating}.name()
}

func mutatingGroups(ms []engine.Mutator) []*webhookGroup {
	groups := map[groupKey]*webhookGroup{}
	for _, m := range ms {
		if m.AdmissionOff {
			continue
		}
		k := groupKey{timeout: timeoutSeconds(m.Descriptor), failure: m.FailurePolicy, reinvoke: webhookReinvocation(m.Reinvocation)}
		addRules(groups, k, m.Descriptor)
	}
	return sortedGroups(groups)
}

func validatingGroups(vs []engine.Validator) []*webhookGroup {
	groups := map[groupKey]*webhookGroup{}
	for _, v := range vs {
		if v.AdmissionOff {
			continue
		}
		addRules(groups, validationKey(v.Descriptor), v.Descriptor)
	}
	return sortedGroups(groups)
}

func addRules(groups map[groupKey]*webhookGroup, k groupKey, d engine.Descriptor) {
	var ops engine.OperationSet
	for _, t := range d.Targets {
		ops |= t.Operations
	}
	if ops == 0 {
		return
	}
	g := groups[k]
	if g == nil {
		g = &webhookGroup{timeout: k.timeout, failure: k.failure, reinvoke: k.reinvoke, validating: k.validating, rules: map[ruleKey]map[string]bool{}, first: d.ID}
		groups[k] = g
	}
	if d.ID.Less(g.first) {
		g.first = d.ID
	}
	add := func(rk ruleKey, resource string) {
		if rk.ops == 0 {
			return
		}
		if g.rules[rk] == nil {
			g.rules[rk] = map[string]bool{}
		}
		g.rules[rk][resource] = true
	}
	if len(d.Resources) > 0 {
		for _, gvr := range d.Resources {
			add(ruleKey{group: gvr.Group, version: gvr.Version, ops: ops}, gvr.Resource)
		}
		return
	}
	for _, t := range d.Targets {
		resource := "*"
		if t.Kind != "*" {
			resource = resourceOf(t)
		}
		add(ruleKey{group: t.Group, version: t.Version, ops: t.Operations}, resource)
	}
}

func resourceOf(t engine.Target) string {
	plural, _ := meta.UnsafeGuessKindToResource(schema.GroupVersionKind{Group: t.Group, Version: t.Version, Kind: t.Kind})
	return plural.Resource
}

func sortedGroups(groups map[groupKey]*webhookGroup) []*webhookGroup {
	out := make([]*webhookGroup, 0, len(groups))
	for _, g := range groups {
		if len(g.rules) > 0 {
			out = append(out, g)
		}
	}
	slices.SortFunc(out, func(a, b *webhookGroup) int {
		// The API server calls a configuration's webhooks in their order: list the
		// groups in the engine's order of their first policies (morph.dev/order, dialect,
		// kind, name), so that across groups the policies still run in that order as far
		// as groups allow. Then Fail before Ignore, IfNeeded before Never, by timeout.
		return cmp.Or(a.first.Compare(b.first), cmp.Compare(b.failure, a.failure), cmp.Compare(a.reinvoke, b.reinvoke), cmp.Compare(a.timeout, b.timeout))
	})
	return out
}

// ruleList turns the group's rules into webhook rules, sorted.
func (g *webhookGroup) ruleList() []admissionregistrationv1.RuleWithOperations {
	keys := make([]ruleKey, 0, len(g.rules))
	for k := range g.rules {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b ruleKey) int {
		return cmp.Or(strings.Compare(a.group, b.group), strings.Compare(a.version, b.version), cmp.Compare(a.ops, b.ops))
	})
	out := make([]admissionregistrationv1.RuleWithOperations, 0, len(keys))
	for _, k := range keys {
		var resources []string
		if g.rules[k]["*"] {
			resources = []string{"*"}
		} else {
			for r := range g.rules[k] {
				resources = append(resources, r)
			}
			slices.Sort(resources)
		}
		out = append(out, admissionregistrationv1.RuleWithOperations{
			Operations: operationTypes(k.ops),
			Rule: admissionregistrationv1.Rule{
				APIGroups:   []string{k.group},
				APIVersions: []string{k.version},
				Resources:   resources,
				Scope:       new(admissionregistrationv1.AllScopes),
			},
		})
	}
	return out
}

func operationTypes(ops engine.OperationSet) []admissionregistrationv1.OperationType {
	if ops == engine.AllOperations {
		return []admissionregistrationv1.OperationType{admissionregistrationv1.OperationAll}
	}
	var out []admissionregistrationv1.OperationType
	for _, op := range []engine.Operation{engine.Create, engine.Update, engine.Delete, engine.Connect} {
		if ops.Has(op) {
			out = append(out, admissionregistrationv1.OperationType(op))
		}
	}
	return out
}

// timeoutSeconds is a policy's webhook timeout: its own, rounded up to whole seconds
// and capped at 30, or 10.
func timeoutSeconds(d engine.Descriptor) int32 {
	if d.Timeout <= 0 {
		return DefaultTimeoutSeconds
	}
	secs := (d.Timeout + time.Second - 1) / time.Second
	return int32(min(max(secs, 1), MaxTimeoutSeconds))
}

func failureType(f engine.FailurePolicy) admissionregistrationv1.FailurePolicyType {
	if f == engine.FailClose {
		return admissionregistrationv1.Fail
	}
	return admissionregistrationv1.Ignore
}

func failureName(f engine.FailurePolicy) string {
	if f == engine.FailClose {
		return "fail"
	}
	return "ignore"
}

// webhookReinvocation is what a webhook configuration can say: the API server reinvokes
// a webhook at most once, so a policy reinvoked once or until convergence both ask for
// IfNeeded (morph's /mutate converges by itself).
func webhookReinvocation(r engine.Reinvocation) engine.Reinvocation {
	if r == engine.ReinvokeOnce {
		return engine.ReinvokeIfNeeded
	}
	return r
}

func reinvocationName(r engine.Reinvocation) string {
	if r == engine.ReinvokeIfNeeded {
		return "ifneeded"
	}
	return "never"
}

func namespaceSelector(own string) *metav1.LabelSelector {
	values := []string{"kube-system"}
	if own != "kube-system" {
		values = append(values, own)
	}
	return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
		Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpNotIn, Values: values,
	}}}
}

func clientConfig(o ConfigOptions, path string) admissionregistrationv1.WebhookClientConfig {
	cc := admissionregistrationv1.WebhookClientConfig{CABundle: o.CABundle}
	if o.Service != nil {
		port := o.Service.Port
		if port == 0 {
			port = 443
		}
		cc.Service = &admissionregistrationv1.ServiceReference{Namespace: o.Service.Namespace, Name: o.Service.Name, Path: new(path), Port: new(port)}
		return cc
	}
	cc.URL = new(strings.TrimSuffix(o.URL, "/") + path)
	return cc
}

// ConfigurationsYAML returns the configurations of Configurations as a YAML stream,
// mutating first; it is empty when the bundle holds neither mutators nor validators.
func ConfigurationsYAML(b *policy.Bundle, o ConfigOptions) ([]byte, error) {
	mutating, validating, err := Configurations(b, o)
	if err != nil {
		return nil, err
	}
	var docs []any
	if mutating != nil {
		docs = append(docs, mutating)
	}
	if validating != nil {
		docs = append(docs, validating)
	}
	var out []byte
	for _, obj := range docs {
		data, err := yaml.Marshal(obj)
		if err != nil {
			return nil, fmt.Errorf("encoding the webhook configuration: %w", err)
		}
		if len(out) > 0 {
			out = append(out, "---\n"...)
		}
		out = append(out, data...)
	}
	return out, nil
}
