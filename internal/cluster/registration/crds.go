package registration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apiextensionsinformers "k8s.io/apiextensions-apiserver/pkg/client/informers/externalversions"
	apiextensionslisters "k8s.io/apiextensions-apiserver/pkg/client/listers/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/morph-dev/morph/internal/policy"
)

// WantedCRDs lists, sorted and once each, the CRDs whose caBundle the bundle's
// converters ask morph to keep (engine.Converter.UpdateCRD: a Katalog entry with
// conversion and updateCRD: true).
func WantedCRDs(b *policy.Bundle) []string {
	if b == nil {
		return nil
	}
	var out []string
	for _, c := range b.Converters {
		if c.UpdateCRD && c.CRD != "" {
			out = append(out, c.CRD)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// CRDCABundles keeps spec.conversion.webhook.clientConfig.caBundle of the CRDs that
// WantedCRDs names equal to the CA bundle (spec 003's updateCRD): at start, on every
// event of such a CRD (a watch), and every Resync (30 s, the spec's safety ticker). It
// watches CRDs from the first snapshot that wants a caBundle, not before. It
// patches only the caBundle: a CRD whose conversion is not a webhook with a clientConfig
// is reported and left alone, as is a CRD that does not exist (yet).
type CRDCABundles struct {
	Client   apiextensionsclient.Interface
	CA       CABundle
	Policies *Policies
	// Wake, when set, wakes the reconciler (the certificate store's changes).
	Wake <-chan struct{}
	// Resync is the backstop period (DefaultResync when 0).
	Resync  time.Duration
	Log     *slog.Logger
	Metrics *Metrics

	crds apiextensionslisters.CustomResourceDefinitionLister

	mu sync.Mutex // guards reported
	// reported are the problems already logged, by CRD, so that the ticker does not
	// repeat them.
	reported map[string]string
}

// Run reconciles until ctx ends.
func (c *CRDCABundles) Run(ctx context.Context) error {
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.Metrics == nil {
		c.Metrics = NewMetrics()
	}
	// CRDs are watched only once a loaded policy asks for a caBundle.
	changed := c.Policies.Changed()
	for !c.wantsAny() {
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		}
	}
	factory := apiextensionsinformers.NewSharedInformerFactory(c.Client, 0)
	informer := factory.Apiextensions().V1().CustomResourceDefinitions()
	t := newTrigger()
	wake := func(obj any) {
		if crd, ok := obj.(*apiextensionsv1.CustomResourceDefinition); ok && c.wanted(crd.Name) {
			t.wake()
		}
	}
	if _, err := informer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    wake,
		UpdateFunc: func(_, obj any) { wake(obj) },
	}); err != nil {
		return err
	}
	c.crds = informer.Lister()
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), informer.Informer().HasSynced) {
		return ctx.Err()
	}
	t.forward(ctx, c.Policies.Changed(), c.Wake)
	loop(ctx, t, c.Resync, c.Reconcile, func(err error) {
		c.Log.Error("CRD caBundle update failed; retrying", "error", err)
	})
	return nil
}

// wantsAny reports whether the current snapshot wants the caBundle of some CRD.
func (c *CRDCABundles) wantsAny() bool {
	snap := c.Policies.Current()
	return snap != nil && len(WantedCRDs(snap.Bundle)) > 0
}

func (c *CRDCABundles) wanted(name string) bool {
	snap := c.Policies.Current()
	return snap != nil && slices.Contains(WantedCRDs(snap.Bundle), name)
}

// Reconcile patches every wanted CRD whose caBundle differs.
func (c *CRDCABundles) Reconcile(ctx context.Context) error {
	snap := c.Policies.Current()
	if snap == nil {
		return nil
	}
	names := WantedCRDs(snap.Bundle)
	if len(names) == 0 {
		return nil
	}
	ca, ok := c.CA.CABundle()
	if !ok {
		return nil
	}
	if len(ca) == 0 {
		c.report("", "no CA bundle is known (certificates given from outside without --ca-file): CRD caBundles are not updated", "crds", names)
		return nil
	}
	var errs []error
	for _, name := range names {
		if err := c.reconcileCRD(ctx, name, ca); err != nil {
			c.Metrics.errors.WithLabelValues(objectCRD).Inc()
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (c *CRDCABundles) reconcileCRD(ctx context.Context, name string, ca []byte) error {
	crd, err := c.crds.Get(name)
	if apierrors.IsNotFound(err) {
		c.report(name, "CRD not found: its conversion caBundle is set once it is created", "crd", name)
		return nil
	}
	if err != nil {
		return err
	}
	conv := crd.Spec.Conversion
	if conv == nil || conv.Strategy != apiextensionsv1.WebhookConverter || conv.Webhook == nil || conv.Webhook.ClientConfig == nil {
		c.report(name, "CRD does not convert through a webhook: set spec.conversion.strategy Webhook and a webhook.clientConfig that reaches morph's /convert; morph keeps only its caBundle",
			"crd", name)
		return nil
	}
	c.report(name, "")
	if bytes.Equal(conv.Webhook.ClientConfig.CABundle, ca) {
		return nil
	}
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": crd.ResourceVersion},
		"spec":     map[string]any{"conversion": map[string]any{"webhook": map[string]any{"clientConfig": map[string]any{"caBundle": ca}}}},
	})
	if err != nil {
		return err
	}
	if _, err := c.Client.ApiextensionsV1().CustomResourceDefinitions().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "morph"}); err != nil {
		return fmt.Errorf("patching the conversion caBundle of CRD %s: %w", name, err)
	}
	c.Metrics.writes.WithLabelValues(objectCRD, "patch").Inc()
	c.Log.Info("CRD conversion caBundle updated", "crd", name)
	return nil
}

// report logs a problem of a CRD once, until it changes; an empty problem clears it.
func (c *CRDCABundles) report(name, problem string, attrs ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.reported == nil {
		c.reported = map[string]string{}
	}
	if c.reported[name] == problem {
		return
	}
	c.reported[name] = problem
	if problem != "" {
		c.Log.Warn(problem, attrs...)
	}
}
