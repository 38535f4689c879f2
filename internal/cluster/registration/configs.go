package registration

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	listers "k8s.io/client-go/listers/admissionregistration/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/morph-dev/morph/internal/webhook"
)

// Metric labels of the objects written.
const (
	objectMutating   = "mutatingwebhookconfiguration"
	objectValidating = "validatingwebhookconfiguration"
	objectCRD        = "customresourcedefinition"
)

// managedBy is the label of every object morph writes.
var managedBy = map[string]string{"app.kubernetes.io/managed-by": "morph"}

// Configs keeps the MutatingWebhookConfiguration and ValidatingWebhookConfiguration
// named Options.Name equal to what webhook.Configurations makes of the server's current
// policies (what morph generate webhooks prints). A configuration no policy needs is
// deleted rather than left with an empty webhook list, so that what exists is what
// morph serves. An object of that name is morph's: a hand edit of it is put back,
// its managed-by label included.
type Configs struct {
	Client kubernetes.Interface
	// Options say how the API server reaches the server; CABundle is taken from CA.
	Options  webhook.ConfigOptions
	CA       CABundle
	Policies *Policies
	// Wake, when set, wakes the reconciler (the certificate store's changes).
	Wake <-chan struct{}
	// Resync is the backstop period (DefaultResync when 0).
	Resync  time.Duration
	Log     *slog.Logger
	Metrics *Metrics
	// Overrides change every webhook registered (flags of morph serve).
	Overrides Overrides

	mutating   listers.MutatingWebhookConfigurationLister
	validating listers.ValidatingWebhookConfigurationLister
}

// Run reconciles until ctx ends: at start, when the policies or the CA bundle change,
// on any event of the two configurations, and every Resync.
func (c *Configs) Run(ctx context.Context) error {
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.Metrics == nil {
		c.Metrics = NewMetrics()
	}
	factory := informers.NewSharedInformerFactoryWithOptions(c.Client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", c.Options.Name).String()
	}))
	t := newTrigger()
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { t.wake() },
		UpdateFunc: func(any, any) { t.wake() },
		DeleteFunc: func(any) { t.wake() },
	}
	mi := factory.Admissionregistration().V1().MutatingWebhookConfigurations()
	vi := factory.Admissionregistration().V1().ValidatingWebhookConfigurations()
	if _, err := mi.Informer().AddEventHandler(handler); err != nil {
		return err
	}
	if _, err := vi.Informer().AddEventHandler(handler); err != nil {
		return err
	}
	c.mutating, c.validating = mi.Lister(), vi.Lister()
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), mi.Informer().HasSynced, vi.Informer().HasSynced) {
		return ctx.Err()
	}
	t.forward(ctx, c.Policies.Changed(), c.Wake)
	loop(ctx, t, c.Resync, c.Reconcile, func(err error) {
		c.Log.Error("webhook registration failed; retrying", "error", err)
	})
	return nil
}

// Reconcile writes the configurations once. Before the first snapshot, or while the CA
// bundle is not known, it does nothing.
func (c *Configs) Reconcile(ctx context.Context) error {
	snap := c.Policies.Current()
	if snap == nil {
		return nil
	}
	ca, ok := c.CA.CABundle()
	if !ok {
		return nil
	}
	opts := c.Options
	opts.CABundle = ca
	mutating, validating, err := webhook.Configurations(snap.Bundle, opts)
	if err != nil {
		return fmt.Errorf("webhook configurations: %w", err)
	}
	if mutating != nil {
		for i := range mutating.Webhooks {
			mutating.Webhooks[i].ObjectSelector = objectSelector(mutating.Webhooks[i].ObjectSelector)
			c.Overrides.apply(&mutating.Webhooks[i].FailurePolicy, mutating.Webhooks[i].NamespaceSelector)
		}
	}
	if validating != nil {
		for i := range validating.Webhooks {
			validating.Webhooks[i].ObjectSelector = objectSelector(validating.Webhooks[i].ObjectSelector)
			c.Overrides.apply(&validating.Webhooks[i].FailurePolicy, validating.Webhooks[i].NamespaceSelector)
		}
	}
	type (
		mwc = admissionregistrationv1.MutatingWebhookConfiguration
		vwc = admissionregistrationv1.ValidatingWebhookConfiguration
	)
	api := c.Client.AdmissionregistrationV1()
	return errors.Join(
		syncConfig(ctx, c, configKind[*mwc, admissionregistrationv1.MutatingWebhook]{
			object: objectMutating, kind: "MutatingWebhookConfiguration", api: api.MutatingWebhookConfigurations(), cached: c.mutating,
			webhooks: func(m *mwc) *[]admissionregistrationv1.MutatingWebhook { return &m.Webhooks }, deepCopy: (*mwc).DeepCopy,
		}, mutating, mutating != nil),
		syncConfig(ctx, c, configKind[*vwc, admissionregistrationv1.ValidatingWebhook]{
			object: objectValidating, kind: "ValidatingWebhookConfiguration", api: api.ValidatingWebhookConfigurations(), cached: c.validating,
			webhooks: func(v *vwc) *[]admissionregistrationv1.ValidatingWebhook { return &v.Webhooks }, deepCopy: (*vwc).DeepCopy,
		}, validating, validating != nil))
}

// configKind is what syncConfig needs to know of one kind of webhook configuration,
// T, whose webhooks are of type W.
type configKind[T metav1.Object, W any] struct {
	object, kind string // metric label, kind for messages
	api          interface {
		Create(context.Context, T, metav1.CreateOptions) (T, error)
		Update(context.Context, T, metav1.UpdateOptions) (T, error)
		Delete(context.Context, string, metav1.DeleteOptions) error
	}
	cached   interface{ Get(name string) (T, error) }
	webhooks func(T) *[]W // the configuration's webhooks field
	deepCopy func(T) T
}

// syncConfig brings the configuration of kind k named c.Options.Name to want: created
// when missing, deleted when want is nil (no policy needs it), updated when its webhooks
// or morph's labels differ. It reads what exists from the informer's cache.
func syncConfig[T metav1.Object, W any](ctx context.Context, c *Configs, k configKind[T, W], want T, wanted bool) (err error) {
	defer c.count(k.object, &err)
	have, err := k.cached.Get(c.Options.Name)
	switch {
	case apierrors.IsNotFound(err) && !wanted:
		return nil
	case apierrors.IsNotFound(err):
		if _, err := k.api.Create(ctx, want, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating %s %s: %w", k.kind, want.GetName(), err)
		}
		c.wrote(k.object, "create", "webhooks", len(*k.webhooks(want)))
		return nil
	case err != nil:
		return err
	case !wanted:
		uid := have.GetUID()
		if err := k.api.Delete(ctx, have.GetName(), metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting %s %s, which no policy needs: %w", k.kind, have.GetName(), err)
		}
		c.wrote(k.object, "delete")
		return nil
	}
	if apiequality.Semantic.DeepEqual(*k.webhooks(have), *k.webhooks(want)) && hasLabels(have.GetLabels()) {
		return nil
	}
	update := k.deepCopy(have)
	*k.webhooks(update) = *k.webhooks(want)
	update.SetLabels(withLabels(have.GetLabels()))
	if _, err := k.api.Update(ctx, update, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("updating %s %s: %w", k.kind, have.GetName(), err)
	}
	c.wrote(k.object, "update", "webhooks", len(*k.webhooks(want)))
	return nil
}

func (c *Configs) wrote(object, verb string, attrs ...any) {
	c.Metrics.writes.WithLabelValues(object, verb).Inc()
	c.Log.Info("webhook registration written", append([]any{"object", object, "name", c.Options.Name, "verb", verb}, attrs...)...)
}

func (c *Configs) count(object string, err *error) {
	if *err != nil {
		c.Metrics.errors.WithLabelValues(object).Inc()
	}
}

// Overrides are what an installation changes in every webhook morph registers: the
// chart's failurePolicy and namespace exclusions (morph serve --webhook-failure-policy,
// --exclude-namespace).
type Overrides struct {
	// FailurePolicy, when set, replaces the failurePolicy of every webhook: what the
	// API server does when it cannot reach morph. What morph answers when a policy
	// itself fails still follows that policy's own failure policy.
	FailurePolicy admissionregistrationv1.FailurePolicyType
	// ExcludeNamespaces are added to the namespaces the namespaceSelector excludes
	// (kube-system and morph's own).
	ExcludeNamespaces []string
}

// apply changes one webhook's failure policy and namespace selector.
func (o Overrides) apply(failure **admissionregistrationv1.FailurePolicyType, namespaces *metav1.LabelSelector) {
	if o.FailurePolicy != "" {
		*failure = new(o.FailurePolicy)
	}
	if len(o.ExcludeNamespaces) == 0 || namespaces == nil {
		return
	}
	for i, req := range namespaces.MatchExpressions {
		if req.Key != "kubernetes.io/metadata.name" || req.Operator != metav1.LabelSelectorOpNotIn {
			continue
		}
		values := slices.Clone(req.Values)
		for _, ns := range o.ExcludeNamespaces {
			if !slices.Contains(values, ns) {
				values = append(values, ns)
			}
		}
		namespaces.MatchExpressions[i].Values = values
		return
	}
	namespaces.MatchExpressions = append(namespaces.MatchExpressions, metav1.LabelSelectorRequirement{
		Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpNotIn, Values: slices.Clone(o.ExcludeNamespaces),
	})
}

// objectSelector is sel as the API server stores it: {} when unset, so that what is
// written compares equal to what is read back.
func objectSelector(sel *metav1.LabelSelector) *metav1.LabelSelector {
	if sel == nil {
		return &metav1.LabelSelector{}
	}
	return sel
}

func hasLabels(labels map[string]string) bool {
	for k, v := range managedBy {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func withLabels(labels map[string]string) map[string]string {
	out := maps.Clone(labels)
	if out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, managedBy)
	return out
}
