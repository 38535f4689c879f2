// Package policies serves morph's policies from the API server: it watches the policy
// kinds of package crds with dynamic informers, compiles them into the snapshots the
// webhook server swaps in (a webhook.Source), isolates each policy's compile errors so
// that one broken policy never takes the others down, and writes each policy's outcome
// to its status (condition Ready) and as an Event, from the leader only.
//
// The package knows no dialect: it compiles through the policy.Loader it is given.
package policies

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"

	"github.com/morph-dev/morph/internal/cluster/crds"
	"github.com/morph-dev/morph/internal/objects"
	"github.com/morph-dev/morph/internal/policy"
	"github.com/morph-dev/morph/internal/webhook"
)

// Resources of the context objects most policies read.
var (
	crdResource       = objects.CRDResource
	namespaceResource = objects.NamespaceResource
)

// maxNeedRounds bounds the compilations of one Load: each round after the first runs
// because the one before found a need not watched yet (a CRD informer can reveal
// custom kinds whose policies then need more).
const maxNeedRounds = 3

// Options configure a Source.
type Options struct {
	// Client reads and watches the policy kinds and context objects. Required.
	Client dynamic.Interface
	// NewLoader returns a loader whose dialects read the given store. Required.
	NewLoader func(*objects.Store) *policy.Loader
	// Kinds are the policy kinds to watch (crds.Kinds() when nil).
	Kinds []crds.Kind
	// Logger receives the source's logs (discarded when nil).
	Logger *slog.Logger
	// Resync is the informers' resync period (none when 0).
	Resync time.Duration
	// SyncTimeout bounds Start's wait for the first lists (DefaultSyncTimeout when 0).
	SyncTimeout time.Duration
}

// DefaultSyncTimeout is how long Start waits for the API server's first lists.
const DefaultSyncTimeout = 2 * time.Minute

// Outcome is the result of compiling one policy object, as its status reports it.
type Outcome struct {
	Ref        Ref
	Generation int64
	// Ready is true when the policy compiled and is served.
	Ready bool
	// Reason is Compiled, CompiledWithWarnings, CompileError or Skipped.
	Reason string
	// Message is the error morph apply prints for the same object, or its warnings.
	Message string
}

// Ref names one policy object.
type Ref struct {
	Kind      crds.Kind
	Version   string // the version the object was read at
	Namespace string
	Name      string
	UID       types.UID
}

// String is the object's kubectl name: plural.group/name, with namespace/ first when
// namespaced. It is also the "file" of the object's loader errors, so that the message
// in its status reads like morph apply's: "assign.mutations.gatekeeper.sh/foo: document
// 1 (Assign "foo"): spec.location: ...".
func (r Ref) String() string {
	s := r.Kind.Plural + "." + r.Kind.Group + "/" + r.Name
	if r.Namespace != "" {
		return r.Namespace + "/" + s
	}
	return s
}

// Source is a webhook.Source backed by informers. Build it with New, then Start it.
type Source struct {
	opts    Options
	log     *slog.Logger
	metrics *metrics
	factory dynamicinformer.DynamicSharedInformerFactory

	// kindCRDs watch the CRD of each policy kind, by name (a field selector): the
	// source learns which policy kinds exist without watching every CRD.
	kindCRDs map[string]cache.SharedIndexInformer

	// generation counts changes seen by the informers: the fingerprint.
	generation atomic.Uint64

	mu sync.Mutex // guards the fields below
	// watched maps each policy kind whose CRD exists to the version it is read at.
	watched map[schema.GroupKind]watchedKind
	// context are the informers of context objects, started for the loaded policies'
	// needs (engine.Descriptor.Needs) or on a first resource.Get; needed marks those of
	// needs, whose changes recompile the policies and whose objects the dialects read
	// from the snapshot's store.
	context   map[schema.GroupVersionResource]cache.SharedIndexInformer
	needed    map[schema.GroupVersionResource]bool
	outcomes  map[types.UID]Outcome
	listeners []chan struct{}
	// stop is the informers' stop channel, once started.
	stop <-chan struct{}
}

type watchedKind struct {
	kind     crds.Kind
	version  string
	informer cache.SharedIndexInformer
}

// New builds a source; Start starts its informers.
func New(opts Options) (*Source, error) {
	if opts.Client == nil || opts.NewLoader == nil {
		return nil, errors.New("cluster policy source needs a client and a loader")
	}
	if opts.Kinds == nil {
		opts.Kinds = crds.Kinds()
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.SyncTimeout <= 0 {
		opts.SyncTimeout = DefaultSyncTimeout
	}
	s := &Source{
		opts:     opts,
		log:      opts.Logger,
		metrics:  newMetrics(),
		factory:  dynamicinformer.NewDynamicSharedInformerFactory(opts.Client, opts.Resync),
		kindCRDs: map[string]cache.SharedIndexInformer{},
		watched:  map[schema.GroupKind]watchedKind{},
		context:  map[schema.GroupVersionResource]cache.SharedIndexInformer{},
		needed:   map[schema.GroupVersionResource]bool{},
		outcomes: map[types.UID]Outcome{},
	}
	for _, k := range opts.Kinds {
		name := k.CRDName()
		inf := dynamicinformer.NewFilteredDynamicInformer(opts.Client, crdResource, "", opts.Resync, cache.Indexers{}, func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
		}).Informer()
		if _, err := inf.AddEventHandler(s.handler(s.crdChanged)); err != nil {
			return nil, err
		}
		s.kindCRDs[name] = inf
	}
	return s, nil
}

// RegisterMetrics registers the reconciliation metrics (the status writer's and the
// Events' too) on reg, the webhook server's registry.
func (s *Source) RegisterMetrics(reg prometheus.Registerer) error { return s.metrics.register(reg) }

// handler counts every event as a change; then, when set, calls also.
func (s *Source) handler(also func()) cache.ResourceEventHandler {
	changed := func() {
		s.generation.Add(1)
		if also != nil {
			also()
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { changed() },
		UpdateFunc: func(any, any) { changed() },
		DeleteFunc: func(any) { changed() },
	}
}

// policyHandler counts the changes of policy objects, except those of their status
// alone (morph's own writes), which change neither the generation nor the metadata a
// dialect reads.
func (s *Source) policyHandler() cache.ResourceEventHandler {
	h := s.handler(nil).(cache.ResourceEventHandlerFuncs)
	h.UpdateFunc = func(oldObj, newObj any) {
		o, ok1 := oldObj.(*unstructured.Unstructured)
		n, ok2 := newObj.(*unstructured.Unstructured)
		if ok1 && ok2 && o.GetGeneration() == n.GetGeneration() &&
			maps.Equal(o.GetLabels(), n.GetLabels()) && maps.Equal(o.GetAnnotations(), n.GetAnnotations()) {
			return
		}
		s.generation.Add(1)
	}
	return h
}

// cached returns the cached object of a policy.
func (s *Source) cached(r Ref) (*unstructured.Unstructured, bool) {
	s.mu.Lock()
	w, ok := s.watched[r.Kind.GroupKind()]
	s.mu.Unlock()
	if !ok {
		return nil, false
	}
	key := r.Name
	if r.Namespace != "" {
		key = r.Namespace + "/" + r.Name
	}
	obj, ok, err := w.informer.GetStore().GetByKey(key)
	if err != nil || !ok {
		return nil, false
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok || u.GetUID() != r.UID {
		return nil, false
	}
	return u, true
}

// Start starts the informers of the policy kinds' CRDs, then one informer per policy
// kind whose CRD exists, and waits until their caches are synced (or ctx ends). Kinds
// whose CRD appears later are watched from then on. Context objects are watched from
// the first Load that needs them.
func (s *Source) Start(ctx context.Context) error {
	s.mu.Lock()
	s.stop = ctx.Done()
	s.mu.Unlock()
	var crdsSynced []cache.InformerSynced
	for _, inf := range s.kindCRDs {
		go inf.Run(ctx.Done())
		crdsSynced = append(crdsSynced, inf.HasSynced)
	}
	// The informers run until ctx ends; the first lists must come within SyncTimeout.
	wait, cancel := context.WithTimeoutCause(ctx, s.opts.SyncTimeout,
		fmt.Errorf("no answer within %v: is the API server reachable, and may morph list and watch CustomResourceDefinitions and the policy kinds? (see docs/cluster.md)", s.opts.SyncTimeout))
	defer cancel()
	if !cache.WaitForCacheSync(wait.Done(), crdsSynced...) {
		return fmt.Errorf("waiting for the CustomResourceDefinitions of the policy kinds: %w", context.Cause(wait))
	}
	s.crdChanged()
	s.factory.Start(ctx.Done())
	s.mu.Lock()
	var synced []cache.InformerSynced
	for _, w := range s.watched {
		synced = append(synced, w.informer.HasSynced)
	}
	s.mu.Unlock()
	if !cache.WaitForCacheSync(wait.Done(), synced...) {
		return fmt.Errorf("waiting for the policy caches: %w", context.Cause(wait))
	}
	go func() {
		// Start informers of kinds whose CRDs appear later.
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				s.factory.Start(ctx.Done())
			}
		}
	}()
	return nil
}

// crdChanged looks for the CRD of every policy kind not yet watched and, when it exists
// and serves a version morph reads, adds an informer for it. It logs whose CRD it is.
func (s *Source) crdChanged() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range s.opts.Kinds {
		if _, ok := s.watched[k.GroupKind()]; ok {
			continue
		}
		inf, ok := s.kindCRDs[k.CRDName()]
		if !ok {
			continue
		}
		obj, found, err := inf.GetStore().GetByKey(k.CRDName())
		if err != nil || !found {
			continue
		}
		crd, _ := obj.(*unstructured.Unstructured)
		if crd == nil {
			continue
		}
		version, ok := servedVersion(crd, k)
		if !ok {
			s.log.Warn("the CustomResourceDefinition serves no version morph reads; its policies are not served",
				"crd", k.CRDName(), "versions", strings.Join(k.Versions, ", "))
			continue
		}
		if !crds.IsOurs(crd.GetLabels()) {
			owner := cmp.Or(crd.GetLabels()[crds.ManagedByLabel], "another owner")
			s.log.Info("using an existing CustomResourceDefinition that morph did not install; morph does not change it",
				"crd", k.CRDName(), "owner", owner, "version", version)
		} else {
			s.log.Info("watching policies", "crd", k.CRDName(), "version", version)
		}
		gvr := schema.GroupVersionResource{Group: k.Group, Version: version, Resource: k.Plural}
		policies := s.factory.ForResource(gvr).Informer()
		if _, err := policies.AddEventHandler(s.policyHandler()); err != nil {
			s.log.Error("cannot watch policies", "crd", k.CRDName(), "error", err)
			continue
		}
		s.watched[k.GroupKind()] = watchedKind{kind: k, version: version, informer: policies}
	}
}

// servedVersion picks the version morph reads a kind at: the storage version of morph's
// CRD when served, else the first of the kind's versions the CRD serves.
func servedVersion(crd *unstructured.Unstructured, k crds.Kind) (string, bool) {
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	served := map[string]bool{}
	for _, v := range versions {
		m, _ := v.(map[string]any)
		name, _ := m["name"].(string)
		if ok, _ := m["served"].(bool); ok {
			served[name] = true
		}
	}
	for _, v := range append([]string{k.Storage}, k.Versions...) {
		if served[v] {
			return v, true
		}
	}
	return "", false
}

// Namespaces finds Namespaces in the informer's cache, for webhook.Options.Namespaces:
// none while no loaded policy needs Namespaces (their informer is not started).
func (s *Source) Namespaces() webhook.NamespaceLookup { return namespaceLookup{s} }

type namespaceLookup struct{ s *Source }

func (n namespaceLookup) Namespace(name string) (map[string]any, bool) {
	n.s.mu.Lock()
	inf, ok := n.s.context[namespaceResource]
	n.s.mu.Unlock()
	if !ok {
		return nil, false
	}
	obj, ok, err := inf.GetStore().GetByKey(name)
	if err != nil || !ok {
		return nil, false
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, false
	}
	return u.Object, true
}

// Fingerprint changes whenever an informer saw a change. It is an atomic read: the
// server may poll it often (morph serve polls every 250ms in cluster mode).
func (s *Source) Fingerprint() (string, error) {
	return strconv.FormatUint(s.generation.Load(), 10), nil
}

// policyObject is one policy read from a cache.
type policyObject struct {
	ref Ref
	doc policy.Document
	gen int64
}

// Load compiles every policy in the caches. A policy that does not compile is left
// out, its error recorded as its Outcome; the others are served. Load fails only when
// nothing can be read.
//
// The dialects read the context objects the policies need (engine.Descriptor.Needs)
// from the store Load gives them: when a compilation needs a resource not watched yet,
// Load starts its informer, waits for its cache and compiles again.
func (s *Source) Load() (*webhook.Snapshot, error) {
	start := time.Now()
	objs := s.policyObjects()
	var (
		store    *objects.Store
		bundle   *policy.Bundle
		outcomes []Outcome
		notes    []string
	)
	for round := 1; ; round++ {
		store = s.contextStore()
		bundle, outcomes, notes = compileIsolated(s.opts.NewLoader(store), objs)
		if round == maxNeedRounds || !s.watchNeeds(bundle) {
			break
		}
	}
	s.record(outcomes)
	s.metrics.observeLoad(outcomes, time.Since(start))
	return &webhook.Snapshot{Bundle: bundle, Namespaces: store, Notes: notes}, nil
}

// contextStore is the store of the context objects the loaded policies need: CRDs
// first, so that the kinds of the others are known.
func (s *Source) contextStore() *objects.Store {
	store := objects.NewStore()
	s.mu.Lock()
	var gvrs []schema.GroupVersionResource
	for gvr := range s.needed {
		gvrs = append(gvrs, gvr)
	}
	informers := maps.Clone(s.context)
	s.mu.Unlock()
	slices.SortFunc(gvrs, func(a, b schema.GroupVersionResource) int {
		switch {
		case a == b:
			return 0
		case a == crdResource:
			return -1
		case b == crdResource:
			return 1
		}
		return strings.Compare(a.String(), b.String())
	})
	for _, gvr := range gvrs {
		for _, o := range informers[gvr].GetStore().List() {
			u, ok := o.(*unstructured.Unstructured)
			if !ok {
				continue
			}
			if u.GetKind() == "" {
				// Objects in a list lack apiVersion and kind.
				kind, ok := store.KindFor(gvr.Group, gvr.Resource)
				if !ok {
					continue
				}
				u = u.DeepCopy()
				withKind(u, gvr.GroupVersion().String(), kind)
			}
			_ = store.Add(u.Object) // an object from the API server has apiVersion, kind, name
		}
	}
	return store
}

// watchNeeds starts the informers of what the bundle's policies need and no informer
// watches for them yet, and waits for their caches (within SyncTimeout). It reports
// whether it started any: the policies must then be compiled again.
func (s *Source) watchNeeds(b *policy.Bundle) bool {
	var needs []schema.GroupVersionResource
	for _, m := range b.Mutators {
		needs = append(needs, m.Needs...)
	}
	for _, v := range b.Validators {
		needs = append(needs, v.Needs...)
	}
	for _, c := range b.Converters {
		needs = append(needs, c.Needs...)
	}
	var synced []cache.InformerSynced
	for _, gvr := range needs {
		if inf, added := s.need(gvr); added {
			synced = append(synced, inf.HasSynced)
		}
	}
	if len(synced) == 0 {
		return false
	}
	s.mu.Lock()
	stop := s.stop
	s.mu.Unlock()
	wait, cancel := context.WithTimeout(context.Background(), s.opts.SyncTimeout)
	defer cancel()
	go func() {
		select {
		case <-stop:
			cancel()
		case <-wait.Done():
		}
	}()
	if !cache.WaitForCacheSync(wait.Done(), synced...) {
		s.log.Error("the context objects the policies need did not load in time; may morph list and watch them? (see docs/cluster.md)", "timeout", s.opts.SyncTimeout)
	}
	return true
}

// need makes gvr a need: its informer is started (when not yet) and its changes
// recompile the policies. added is false when it was a need already.
func (s *Source) need(gvr schema.GroupVersionResource) (inf cache.SharedIndexInformer, added bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.needed[gvr] {
		return nil, false
	}
	s.needed[gvr] = true
	inf = s.startInformer(gvr)
	if _, err := inf.AddEventHandler(s.handler(nil)); err != nil {
		s.log.Error("cannot watch context objects", "resource", gvr.String(), "error", err)
	}
	s.log.Info("watching context objects a policy needs", "resource", resourceName(gvr))
	return inf, true
}

// startInformer returns the informer of gvr, started. Called with mu held.
func (s *Source) startInformer(gvr schema.GroupVersionResource) cache.SharedIndexInformer {
	inf, ok := s.context[gvr]
	if !ok {
		inf = s.factory.ForResource(gvr).Informer()
		s.context[gvr] = inf
		s.metrics.contextInformers.WithLabelValues(resourceName(gvr)).Set(1)
	}
	if s.stop != nil {
		s.factory.Start(s.stop)
	}
	return inf
}

// resourceName is gvr as a metric label and in logs: resource.group/version, or
// resource/version for the core group.
func resourceName(gvr schema.GroupVersionResource) string {
	if gvr.Group == "" {
		return gvr.Resource + "/" + gvr.Version
	}
	return gvr.Resource + "." + gvr.Group + "/" + gvr.Version
}

// withKind sets apiVersion and kind, which objects in a list lack.
func withKind(u *unstructured.Unstructured, apiVersion, kind string) {
	if u.GetKind() == "" {
		u.SetAPIVersion(apiVersion)
		u.SetKind(kind)
	}
}

// policyObjects lists every cached policy, in a fixed order (kind, namespace, name).
func (s *Source) policyObjects() []policyObject {
	s.mu.Lock()
	watched := make([]watchedKind, 0, len(s.watched))
	for _, w := range s.watched {
		watched = append(watched, w)
	}
	s.mu.Unlock()
	var out []policyObject
	for _, w := range watched {
		for _, o := range w.informer.GetStore().List() {
			u, ok := o.(*unstructured.Unstructured)
			if !ok {
				continue
			}
			// Informers share their objects: the dialects read a copy.
			obj := u.DeepCopy().Object
			// The status is morph's own output, not part of the policy.
			delete(obj, "status")
			ref := Ref{Kind: w.kind, Version: w.version, Namespace: u.GetNamespace(), Name: u.GetName(), UID: u.GetUID()}
			out = append(out, policyObject{
				ref: ref,
				doc: policy.Document{File: ref.String(), Index: 1, Object: obj},
				gen: u.GetGeneration(),
			})
		}
	}
	slices.SortFunc(out, func(a, b policyObject) int { return strings.Compare(a.ref.String(), b.ref.String()) })
	return out
}

// Outcomes returns the outcome of every policy of the last load.
func (s *Source) Outcomes() []Outcome {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Outcome, 0, len(s.outcomes))
	for _, o := range s.outcomes {
		out = append(out, o)
	}
	slices.SortFunc(out, func(a, b Outcome) int { return strings.Compare(a.Ref.String(), b.Ref.String()) })
	return out
}

// Subscribe returns a channel that receives a value (coalesced) after every load.
func (s *Source) Subscribe() <-chan struct{} {
	ch := make(chan struct{}, 1)
	s.mu.Lock()
	s.listeners = append(s.listeners, ch)
	s.mu.Unlock()
	return ch
}

func (s *Source) record(outcomes []Outcome) {
	s.mu.Lock()
	s.outcomes = make(map[types.UID]Outcome, len(outcomes))
	for _, o := range outcomes {
		s.outcomes[o.Ref.UID] = o
	}
	listeners := slices.Clone(s.listeners)
	s.mu.Unlock()
	for _, ch := range listeners {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}
