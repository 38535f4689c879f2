package background

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

// listPage is the page size of LiveObjects.List.
const listPage = 500

// LiveObjects reads objects from the API server (a request.Objects): what the leader's
// scans and triggers list, so that they see every object as it is now.
type LiveObjects struct {
	Client dynamic.Interface
}

// List lists the objects of a resource in a namespace ("" for all), page by page.
func (o LiveObjects) List(ctx context.Context, gvr schema.GroupVersionResource, namespace string) ([]map[string]any, error) {
	var out []map[string]any
	opts := metav1.ListOptions{Limit: listPage}
	for {
		l, err := o.Client.Resource(gvr).Namespace(namespace).List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("listing %s: %w", gvr.String(), err)
		}
		for i := range l.Items {
			obj := l.Items[i].Object
			if _, ok := obj["kind"]; !ok {
				// Items of a list may lack apiVersion and kind: the list's kind names them.
				obj["apiVersion"] = l.GetAPIVersion()
				obj["kind"] = trimList(l.GetKind())
			}
			out = append(out, obj)
		}
		if opts.Continue = l.GetContinue(); opts.Continue == "" {
			return out, nil
		}
	}
}

// Get reads one object; nil, nil when it does not exist.
func (o LiveObjects) Get(ctx context.Context, gvr schema.GroupVersionResource, namespace, name string) (map[string]any, error) {
	u, err := o.Client.Resource(gvr).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s %s/%s: %w", gvr.String(), namespace, name, err)
	}
	return u.Object, nil
}

func trimList(kind string) string {
	if len(kind) > 4 && kind[len(kind)-4:] == "List" {
		return kind[:len(kind)-4]
	}
	return kind
}
