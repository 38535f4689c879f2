// Package globalcontext reads Kyverno's GlobalContextEntries (globalcontextentries.kyverno.io)
// and what they cache from the API server, for morph serve in cluster mode: the entries
// with an informer, each spec.kubernetesResource with its own informer (as Kyverno's
// globalcontext/k8sresource does), each spec.apiCall.urlPath with a call of the API
// server's raw path. Informers start on the first read, so morph watches only what the
// loaded policies read. What the entry means (projections, refreshInterval, service
// calls, the background polling of apiCalls) is the CEL dialect's, in one place for
// offline and cluster; the source tells it when an entry changes or goes (OnChange)
// and hears the outcome of each apiCall (APICallRefreshed), from which the leader's
// StatusWriter writes the entries' status.
//
// The package knows no dialect: a *Source satisfies the dialect's GlobalContextSource.
package globalcontext

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// EntryResource is Kyverno's GlobalContextEntry resource, at the version Kyverno 1.19
// stores and reads (its CRD serves v2, v2beta1 and v2alpha1).
var EntryResource = schema.GroupVersionResource{Group: "kyverno.io", Version: "v2beta1", Resource: "globalcontextentries"}

// recheck is how long a missing GlobalContextEntry CRD, or a kubernetesResource the
// API server does not serve, is remembered before the next read asks the API server
// again.
const recheck = 30 * time.Second

// errNoCRD is the answer to every read while the API server serves no
// GlobalContextEntries.
var errNoCRD = fmt.Errorf("the API server serves no GlobalContextEntries (%s): install Kyverno's CustomResourceDefinition globalcontextentries.kyverno.io to use globalContext.get", EntryResource)

// Source reads GlobalContextEntries and their data from the API server.
type Source struct {
	// Logger, when set, logs an apiCall that fails, or fails otherwise than before, and
	// one that answers again (not every failed call: a failing entry keeps failing).
	Logger *slog.Logger

	client dynamic.Interface
	rest   rest.Interface
	now    func() time.Time

	mu sync.Mutex
	// stop ends the informers; nil until Start.
	stop    <-chan struct{}
	entries cache.SharedIndexInformer
	// noCRD is when the API server last said it serves no GlobalContextEntries.
	noCRD     time.Time
	resources map[string]cache.SharedIndexInformer
	// failed remembers, by resources key, a kubernetesResource the API server would not
	// list, for recheck.
	failed map[string]failure
	// apiCalls is the outcome of each entry's apiCall, by entry name.
	apiCalls map[string]apiCallState
	// onChange is called with an entry's name when it changes or goes.
	onChange []func(name string)
	// changed wakes the status writer.
	changed chan struct{}
}

// failure is a list error and when it happened.
type failure struct {
	err error
	at  time.Time
}

// apiCallState is what the dialect reported of an entry's apiCall.
type apiCallState struct {
	// refreshed is when the last successful call answered (zero: none yet).
	refreshed time.Time
	// err is the last call's error, nil when it succeeded.
	err error
}

// New returns a source reading through client (entries and kubernetesResource objects)
// and restClient (apiCall urlPath: a client of the API server's root, such as
// kubernetes.Clientset's Discovery().RESTClient()).
func New(client dynamic.Interface, restClient rest.Interface) *Source {
	return &Source{
		client: client, rest: restClient, now: time.Now,
		resources: map[string]cache.SharedIndexInformer{},
		failed:    map[string]failure{},
		apiCalls:  map[string]apiCallState{},
		changed:   make(chan struct{}, 1),
	}
}

// OnChange registers f, called with an entry's name when its spec changes or it is
// deleted (wire the dialect's APICallCache.Forget here: its poller stops).
func (s *Source) OnChange(f func(name string)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.onChange = append(s.onChange, f)
}

// APICallRefreshed records the outcome of an entry's apiCall (err nil on success, at
// when it answered), for the entry's status: pass it to the dialect's
// APICallCache.Poll.
func (s *Source) APICallRefreshed(name string, at time.Time, err error) {
	s.mu.Lock()
	st, known := s.apiCalls[name]
	if log := s.Logger; log != nil {
		switch {
		case err != nil && (st.err == nil || st.err.Error() != err.Error()):
			log.Warn("GlobalContextEntry apiCall failed", "entry", name, "error", err)
		case err == nil && known && st.err != nil:
			log.Info("GlobalContextEntry apiCall answers again", "entry", name)
		}
	}
	st.err = err
	if err == nil {
		st.refreshed = at
	}
	s.apiCalls[name] = st
	s.mu.Unlock()
	s.notify()
}

// notify wakes the status writer.
func (s *Source) notify() {
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// entryChanged forgets what is known of an entry that changed or went.
func (s *Source) entryChanged(name string) {
	s.mu.Lock()
	delete(s.apiCalls, name)
	hooks := append([]func(string){}, s.onChange...)
	s.mu.Unlock()
	for _, f := range hooks {
		f(name)
	}
	s.notify()
}

// Start lets the source start informers, which run until ctx ends.
func (s *Source) Start(ctx context.Context) {
	s.mu.Lock()
	s.stop = ctx.Done()
	s.mu.Unlock()
}

// GlobalContextEntry returns the entry named name, nil when there is none (as
// Kyverno's, globalContext.get of a missing entry is null). When the API server serves
// no GlobalContextEntries (Kyverno's CRD is not installed) every read is an error
// saying so, answered from memory for 30 s before the API server is asked again.
func (s *Source) GlobalContextEntry(ctx context.Context, name string) (map[string]any, error) {
	inf, err := s.entryInformer(ctx)
	if err != nil || inf == nil {
		return nil, err
	}
	obj, ok, err := inf.GetStore().GetByKey(name)
	if err != nil || !ok {
		return nil, err
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, fmt.Errorf("GlobalContextEntry %s: unexpected cache entry %T", name, obj)
	}
	// Shared with the informer's cache, as GlobalContextSource allows: the dialect only
	// reads it, and a spec object it has seen keeps its JSON (no marshal per read).
	return u.Object, nil
}

func (s *Source) entryInformer(ctx context.Context) (cache.SharedIndexInformer, error) {
	s.mu.Lock()
	stop, inf, noCRD := s.stop, s.entries, s.noCRD
	s.mu.Unlock()
	if stop == nil {
		return nil, fmt.Errorf("reading GlobalContextEntries: the cluster source is not started")
	}
	if inf == nil {
		if !noCRD.IsZero() && s.now().Sub(noCRD) < recheck {
			return nil, errNoCRD
		}
		// One cheap list tells whether the CRD exists; without it an informer would
		// wait in vain.
		_, err := s.client.Resource(EntryResource).List(ctx, metav1.ListOptions{Limit: 1})
		if apierrors.IsNotFound(err) {
			s.mu.Lock()
			s.noCRD = s.now()
			s.mu.Unlock()
			return nil, errNoCRD
		}
		if err != nil {
			return nil, fmt.Errorf("listing GlobalContextEntries (may morph list and watch globalcontextentries.kyverno.io?): %w", err)
		}
		s.mu.Lock()
		if s.entries == nil {
			s.noCRD = time.Time{}
			s.entries = dynamicinformer.NewFilteredDynamicInformer(s.client, EntryResource, metav1.NamespaceAll, 0, cache.Indexers{}, nil).Informer()
			if _, err := s.entries.AddEventHandler(cache.ResourceEventHandlerFuncs{
				UpdateFunc: func(oldObj, newObj any) {
					o, ok1 := oldObj.(*unstructured.Unstructured)
					n, ok2 := newObj.(*unstructured.Unstructured)
					if ok1 && ok2 && !equality.Semantic.DeepEqual(o.Object["spec"], n.Object["spec"]) {
						s.entryChanged(n.GetName())
					}
				},
				DeleteFunc: func(obj any) {
					if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
						obj = d.Obj
					}
					if u, ok := obj.(*unstructured.Unstructured); ok {
						s.entryChanged(u.GetName())
					}
				},
			}); err != nil {
				s.mu.Unlock()
				return nil, fmt.Errorf("watching GlobalContextEntries: %w", err)
			}
			go s.entries.Run(stop)
		}
		inf = s.entries
		s.mu.Unlock()
	}
	if !inf.HasSynced() && !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return nil, fmt.Errorf("reading GlobalContextEntries: the cache did not sync in time")
	}
	return inf, nil
}

// entryResource is the resource a kubernetesResource names (Kyverno lowercases it)
// and the key of its informer.
func entryResource(group, version, resource, namespace string) (schema.GroupVersionResource, string) {
	gvr := schema.GroupVersionResource{Group: group, Version: version, Resource: strings.ToLower(resource)}
	return gvr, gvr.String() + "|" + namespace
}

// ResourceObjects lists the objects of a kubernetesResource from its informer (one per
// resource and namespace, as Kyverno's k8sresource entries), started on first use. A
// resource the API server will not list (not served, or forbidden) is an error at once,
// remembered for 30 s, rather than a wait for an informer that cannot sync.
func (s *Source) ResourceObjects(ctx context.Context, group, version, resource, namespace string) ([]any, error) {
	if version == "" || resource == "" {
		return nil, fmt.Errorf("version and resource are required (Kyverno's rule)")
	}
	gvr, key := entryResource(group, version, resource, namespace)
	s.mu.Lock()
	stop, inf, failed := s.stop, s.resources[key], s.failed[key]
	s.mu.Unlock()
	if stop == nil {
		return nil, fmt.Errorf("reading %s: the cluster source is not started", gvr)
	}
	if inf == nil {
		if failed.err != nil && s.now().Sub(failed.at) < recheck {
			return nil, failed.err
		}
		// One cheap list tells whether the API server serves the resource (and lets
		// morph list it); without it an informer would wait in vain.
		if _, err := s.client.Resource(gvr).Namespace(namespace).List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
			err = listError(gvr, namespace, err)
			if ctx.Err() == nil {
				s.mu.Lock()
				s.failed[key] = failure{err: err, at: s.now()}
				s.mu.Unlock()
				s.notify()
			}
			return nil, err
		}
		s.mu.Lock()
		delete(s.failed, key)
		if inf = s.resources[key]; inf == nil {
			inf = dynamicinformer.NewFilteredDynamicInformer(s.client, gvr, namespace, 0, cache.Indexers{}, nil).Informer()
			s.resources[key] = inf
			go inf.Run(stop)
		}
		s.mu.Unlock()
	}
	if !inf.HasSynced() {
		if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
			return nil, fmt.Errorf("reading %s: the cache did not sync in time (may morph list and watch it?)", gvr)
		}
		s.notify()
	}
	items := inf.GetStore().List()
	out := make([]any, 0, len(items))
	for _, o := range items {
		if u, ok := o.(*unstructured.Unstructured); ok {
			out = append(out, u.DeepCopy().Object)
		}
	}
	return out, nil
}

// listError says why a kubernetesResource cannot be read.
func listError(gvr schema.GroupVersionResource, namespace string, err error) error {
	where := " " + gvr.GroupResource().String() + " at " + gvr.Version
	if namespace != "" {
		where += " in namespace " + namespace
	}
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Errorf("reading%s: the API server does not serve this resource (is its CustomResourceDefinition installed, at version %s?): %w", where, gvr.Version, err)
	case apierrors.IsForbidden(err):
		return fmt.Errorf("reading%s: morph may not list it (give morph's ClusterRole list and watch on it): %w", where, err)
	}
	return fmt.Errorf("reading%s: %w", where, err)
}

// APIPath calls the API server's raw path, as Kyverno's apiCall executor does.
func (s *Source) APIPath(ctx context.Context, method, path string, body []byte) ([]byte, error) {
	req := s.rest.Verb(method).AbsPath(path)
	if body != nil {
		req = req.Body(body).SetHeader("Content-Type", "application/json")
	}
	data, err := req.DoRaw(ctx)
	if err != nil {
		if apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) {
			return nil, fmt.Errorf("failed to %s resource with raw url: %s: permission denied: %w", method, path, err)
		}
		return nil, fmt.Errorf("failed to %s resource with raw url: %s: %w", method, path, err)
	}
	return data, nil
}
