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
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
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

// Resources of the context objects every cluster source watches.
var (
	crdResource       = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	namespaceResource = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
)

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

	crdInformer, nsInformer cache.SharedIndexInformer

	// generation counts changes seen by the informers: the fingerprint.
	generation atomic.Uint64

	mu sync.Mutex // guards the fields below
	// watched maps each policy kind whose CRD exists to the version it is read at.
	watched   map[schema.GroupKind]watchedKind
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
		watched:  map[schema.GroupKind]watchedKind{},
		outcomes: map[types.UID]Outcome{},
	}
	s.crdInformer = s.factory.ForResource(crdResource).Informer()
	s.nsInformer = s.factory.ForResource(namespaceResource).Informer()
	if _, err := s.crdInformer.AddEventHandler(s.handler(s.crdChanged)); err != nil {
		return nil, err
	}
	if _, err := s.nsInformer.AddEventHandler(s.handler(nil)); err != nil {
		return nil, err
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

// Start starts the informers of the context objects, then one informer per policy kind
// whose CRD exists, and waits until their caches are synced (or ctx ends). Kinds whose
// CRD appears later are watched from then on.
func (s *Source) Start(ctx context.Context) error {
	s.mu.Lock()
	s.stop = ctx.Done()
	s.mu.Unlock()
	s.factory.Start(ctx.Done())
	// The informers run until ctx ends; the first lists must come within SyncTimeout.
	wait, cancel := context.WithTimeoutCause(ctx, s.opts.SyncTimeout,
		fmt.Errorf("no answer within %v: is the API server reachable, and may morph list and watch CustomResourceDefinitions, Namespaces and the policy kinds? (see docs/cluster.md)", s.opts.SyncTimeout))
	defer cancel()
	if !cache.WaitForCacheSync(wait.Done(), s.crdInformer.HasSynced, s.nsInformer.HasSynced) {
		return fmt.Errorf("waiting for the CustomResourceDefinition and Namespace caches: %w", context.Cause(wait))
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
		obj, ok, err := s.crdInformer.GetStore().GetByKey(k.CRDName())
		if err != nil || !ok {
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
		inf := s.factory.ForResource(gvr).Informer()
		if _, err := inf.AddEventHandler(s.policyHandler()); err != nil {
			s.log.Error("cannot watch policies", "crd", k.CRDName(), "error", err)
			continue
		}
		s.watched[k.GroupKind()] = watchedKind{kind: k, version: version, informer: inf}
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

// Namespaces finds Namespaces in the informer's cache, for webhook.Options.Namespaces.
func (s *Source) Namespaces() webhook.NamespaceLookup {
	return namespaceLookup{s.nsInformer.GetStore()}
}

type namespaceLookup struct{ store cache.Store }

func (n namespaceLookup) Namespace(name string) (map[string]any, bool) {
	obj, ok, err := n.store.GetByKey(name)
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
func (s *Source) Load() (*webhook.Snapshot, error) {
	start := time.Now()
	store := objects.NewStore()
	for _, o := range s.crdInformer.GetStore().List() {
		if u, ok := o.(*unstructured.Unstructured); ok {
			withKind(u, "apiextensions.k8s.io/v1", "CustomResourceDefinition")
			_ = store.Add(u.Object) // a CRD from the API server has apiVersion, kind, name
		}
	}
	for _, o := range s.nsInformer.GetStore().List() {
		if u, ok := o.(*unstructured.Unstructured); ok {
			withKind(u, "v1", "Namespace")
			_ = store.Add(u.Object)
		}
	}
	objs := s.policyObjects()
	loader := s.opts.NewLoader(store)
	bundle, outcomes, notes := compileIsolated(loader, objs)
	s.record(outcomes)
	s.metrics.observeLoad(outcomes, time.Since(start))
	return &webhook.Snapshot{Bundle: bundle, Namespaces: store, Notes: notes}, nil
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
