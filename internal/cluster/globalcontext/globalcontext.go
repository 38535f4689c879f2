// Package globalcontext reads Kyverno's GlobalContextEntries (globalcontextentries.kyverno.io)
// and what they cache from the API server, for morph serve in cluster mode: the entries
// with an informer, each spec.kubernetesResource with its own informer (as Kyverno's
// globalcontext/k8sresource does), each spec.apiCall.urlPath with a call of the API
// server's raw path. Informers start on the first read, so morph watches only what the
// loaded policies read. What the entry means (projections, refreshInterval, service
// calls) is the CEL dialect's, in one place for offline and cluster.
//
// The package knows no dialect: a *Source satisfies the dialect's GlobalContextSource.
package globalcontext

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

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

// recheck is how long a missing GlobalContextEntry CRD is remembered before the next
// read asks the API server again.
const recheck = 30 * time.Second

// Source reads GlobalContextEntries and their data from the API server.
type Source struct {
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
}

// New returns a source reading through client (entries and kubernetesResource objects)
// and restClient (apiCall urlPath: a client of the API server's root, such as
// kubernetes.Clientset's Discovery().RESTClient()).
func New(client dynamic.Interface, restClient rest.Interface) *Source {
	return &Source{client: client, rest: restClient, now: time.Now, resources: map[string]cache.SharedIndexInformer{}}
}

// Start lets the source start informers, which run until ctx ends.
func (s *Source) Start(ctx context.Context) {
	s.mu.Lock()
	s.stop = ctx.Done()
	s.mu.Unlock()
}

// GlobalContextEntry returns the entry named name, nil when there is none (or when the
// API server serves no GlobalContextEntries: Kyverno's CRD is not installed).
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
	return u.DeepCopy().Object, nil
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
			return nil, nil
		}
		// One cheap list tells whether the CRD exists; without it an informer would
		// wait in vain.
		_, err := s.client.Resource(EntryResource).List(ctx, metav1.ListOptions{Limit: 1})
		if apierrors.IsNotFound(err) {
			s.mu.Lock()
			s.noCRD = s.now()
			s.mu.Unlock()
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("listing GlobalContextEntries (may morph list and watch globalcontextentries.kyverno.io?): %w", err)
		}
		s.mu.Lock()
		if s.entries == nil {
			s.entries = dynamicinformer.NewFilteredDynamicInformer(s.client, EntryResource, metav1.NamespaceAll, 0, cache.Indexers{}, nil).Informer()
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

// ResourceObjects lists the objects of a kubernetesResource from its informer (one per
// resource and namespace, as Kyverno's k8sresource entries), started on first use.
func (s *Source) ResourceObjects(ctx context.Context, group, version, resource, namespace string) ([]any, error) {
	if version == "" || resource == "" {
		return nil, fmt.Errorf("version and resource are required (Kyverno's rule)")
	}
	gvr := schema.GroupVersionResource{Group: group, Version: version, Resource: strings.ToLower(resource)}
	key := gvr.String() + "|" + namespace
	s.mu.Lock()
	stop := s.stop
	inf := s.resources[key]
	if inf == nil && stop != nil {
		inf = dynamicinformer.NewFilteredDynamicInformer(s.client, gvr, namespace, 0, cache.Indexers{}, nil).Informer()
		s.resources[key] = inf
		go inf.Run(stop)
	}
	s.mu.Unlock()
	if stop == nil {
		return nil, fmt.Errorf("reading %s: the cluster source is not started", gvr)
	}
	if !inf.HasSynced() && !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return nil, fmt.Errorf("reading %s: the cache did not sync in time (does the resource exist, and may morph list and watch it?)", gvr)
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
