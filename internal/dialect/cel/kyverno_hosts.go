package cel

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/go-containerregistry/pkg/v1/remote"
	sdkhttp "github.com/kyverno/sdk/extensions/cel/libs/http"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/morph-dev/morph/internal/objects"
)

// ImageDataReader answers image.getMetadata: offline from the images of a Kyverno CLI
// context file (cli.kyverno.io/v1alpha1 Context, spec.images), in a cluster from the
// registry when the operator allows it.
type ImageDataReader interface {
	// ImageData returns the data of an image in the shape of Kyverno's image data
	// (image, resolvedImage, registry, repository, tag, digest, manifest, config, ...).
	ImageData(ctx context.Context, image string) (map[string]any, error)
}

// resourceHost adapts a ResourceReader to the sdk's resource library.
type resourceHost struct {
	r     ResourceReader
	store *objects.Store
}

func (h resourceHost) ListResources(apiVersion, res, namespace string, sel map[string]string) (*unstructured.UnstructuredList, error) {
	objs, err := h.r.List(context.Background(), apiVersion, res, namespace)
	if err != nil {
		return nil, err
	}
	selector := labels.SelectorFromSet(sel)
	list := &unstructured.UnstructuredList{Object: map[string]any{"apiVersion": apiVersion, "kind": "List"}}
	for _, o := range objs {
		if len(sel) > 0 && !selector.Matches(labelSet(o)) {
			continue
		}
		list.Items = append(list.Items, unstructured.Unstructured{Object: o})
	}
	return list, nil
}

func (h resourceHost) GetResource(apiVersion, res, namespace, name string) (*unstructured.Unstructured, error) {
	obj, err := h.r.Get(context.Background(), apiVersion, res, namespace, name)
	if err != nil {
		return nil, err
	}
	if obj == nil {
		gv, _ := schema.ParseGroupVersion(apiVersion)
		return nil, apierrors.NewNotFound(gv.WithResource(res).GroupResource(), name)
	}
	return &unstructured.Unstructured{Object: obj}, nil
}

func (h resourceHost) PostResource(apiVersion, res, namespace string, _ map[string]any) (*unstructured.Unstructured, error) {
	return nil, fmt.Errorf("resource.post(%q, %q, %q): morph does not create objects from a mutating policy; use a GeneratingPolicy in Kyverno", apiVersion, res, namespace)
}

func (h resourceHost) ToGVR(apiVersion, kind string) (*schema.GroupVersionResource, error) {
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return nil, err
	}
	gvr := resolver{store: h.store}.resourceFor(gv.WithKind(kind))
	if gvr.Resource == "" {
		return nil, fmt.Errorf("kind %s of %s is unknown: pass its CustomResourceDefinition with --context", kind, apiVersion)
	}
	return &gvr, nil
}

// imageHost adapts an ImageDataReader to the sdk's imagedata library.
type imageHost struct{ r ImageDataReader }

func (h imageHost) GetImageData(image string, _ []remote.Option) (map[string]any, error) {
	return h.r.ImageData(context.Background(), image)
}

// namespacedGlobalContext is what a NamespacedMutatingPolicy gets for globalContext.*,
// as in Kyverno: a failure.
type namespacedGlobalContext struct{}

func (namespacedGlobalContext) GetGlobalReference(string, string) (any, error) {
	return nil, errors.New("globalContext.* is not allowed in namespaced policies")
}

// namespacedHTTP is what a NamespacedMutatingPolicy gets for http.*: Kyverno turns it off
// unless its --allowHTTPInNamespacedPolicies flag is set, and morph keeps it off.
type namespacedHTTP struct{}

var errNamespacedHTTP = errors.New("http calls are not allowed in namespaced policies")

func (namespacedHTTP) Get(string, map[string]string) (any, error) { return nil, errNamespacedHTTP }
func (namespacedHTTP) Post(string, any, map[string]string) (any, error) {
	return nil, errNamespacedHTTP
}
func (n namespacedHTTP) Client(string) (sdkhttp.ContextInterface, error) {
	return n, nil
}

// contextGroup is the group of the Kyverno CLI's context files.
const contextGroup = "cli.kyverno.io"

// contextImage reads an image's data from the Kyverno CLI Context objects in the store
// (spec.images, matched by their image field as Kyverno's CLI does).
func (s storeReader) contextImage(image string) (map[string]any, bool) {
	if s.store == nil {
		return nil, false
	}
	for _, c := range s.store.List(contextGroup, "Context", "") {
		spec, _ := c["spec"].(map[string]any)
		images, _ := spec["images"].([]any)
		for _, i := range images {
			m, _ := i.(map[string]any)
			if m["image"] == image {
				return m, true
			}
		}
	}
	return nil, false
}
