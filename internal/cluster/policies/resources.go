package policies

import (
	"context"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"
)

// Get answers a policy's read of one object (Kyverno's resource.Get) from an informer
// on its resource, started on the first read of that resource and kept from then on:
// morph watches only what the loaded policies read. The first read of a resource waits
// for the informer's cache, within ctx (the request's deadline). apiVersion is "v1" or
// "group/version"; resource is the plural. A missing object is nil and no error.
func (s *Source) Get(ctx context.Context, apiVersion, resource, namespace, name string) (map[string]any, error) {
	inf, err := s.resourceInformer(ctx, apiVersion, resource)
	if err != nil {
		return nil, err
	}
	key := name
	if namespace != "" {
		key = namespace + "/" + name
	}
	obj, ok, err := inf.GetStore().GetByKey(key)
	if err != nil {
		return nil, err
	}
	if !ok {
		// As the dialects' ResourceReader says: no object is no error (Kyverno's
		// resource.get answers null).
		return nil, nil
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, fmt.Errorf("%s %s %s: unexpected cache entry %T", apiVersion, resource, key, obj)
	}
	return u.DeepCopy().Object, nil
}

// List answers resource.List from the same informers, in namespace ("" for all).
func (s *Source) List(ctx context.Context, apiVersion, resource, namespace string) ([]map[string]any, error) {
	inf, err := s.resourceInformer(ctx, apiVersion, resource)
	if err != nil {
		return nil, err
	}
	var out []map[string]any
	for _, o := range inf.GetStore().List() {
		u, ok := o.(*unstructured.Unstructured)
		if ok && (namespace == "" || u.GetNamespace() == namespace) {
			out = append(out, u.DeepCopy().Object)
		}
	}
	return out, nil
}

func (s *Source) resourceInformer(ctx context.Context, apiVersion, resource string) (cache.SharedIndexInformer, error) {
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return nil, fmt.Errorf("apiVersion %q: %w", apiVersion, err)
	}
	s.mu.Lock()
	if s.stop == nil {
		s.mu.Unlock()
		return nil, fmt.Errorf("reading %s %s: the cluster source is not started", apiVersion, resource)
	}
	inf := s.startInformer(gv.WithResource(strings.ToLower(resource)))
	s.mu.Unlock()
	if !inf.HasSynced() && !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return nil, fmt.Errorf("reading %s %s: the cache did not sync in time (does the resource exist, and may morph list and watch it?)", apiVersion, resource)
	}
	return inf, nil
}
