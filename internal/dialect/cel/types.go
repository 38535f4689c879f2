package cel

import (
	"encoding/json"
	"fmt"
	"sync"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/controller/openapi/builder"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/apiserver/pkg/admission/plugin/policy/mutating/patch"
	"k8s.io/client-go/applyconfigurations"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/kube-openapi/pkg/spec3"

	"github.com/morph-dev/morph/internal/objects"
)

// TypeConverterSource finds the schema of a kind, which ApplyConfiguration mutations
// need to merge (as server-side apply does).
type TypeConverterSource interface {
	TypeConverter(gvk schema.GroupVersionKind) (managedfields.TypeConverter, error)
}

// TypeConverterManagerSource adapts the API server's TypeConverterManager (built with
// patch.NewTypeConverterManager on a cluster's /openapi/v3) to a TypeConverterSource. The
// caller runs the manager.
func TypeConverterManagerSource(m patch.TypeConverterManager) TypeConverterSource {
	return managerSource{m}
}

type managerSource struct{ m patch.TypeConverterManager }

func (s managerSource) TypeConverter(gvk schema.GroupVersionKind) (managedfields.TypeConverter, error) {
	if tc := s.m.GetTypeConverter(gvk); tc != nil {
		return tc, nil
	}
	return nil, fmt.Errorf("no schema for %s: the API server does not publish one (yet)", gvk)
}

// offlineTypes finds schemas offline: the built-in kinds from client-go's own schemas,
// custom resources from the CustomResourceDefinitions among the context objects.
type offlineTypes struct {
	store *objects.Store

	builtinOnce sync.Once
	builtin     managedfields.TypeConverter

	mu  sync.Mutex
	crd map[schema.GroupVersionKind]crdConverter
}

type crdConverter struct {
	tc  managedfields.TypeConverter
	err error
}

func newOfflineTypes(store *objects.Store) *offlineTypes {
	return &offlineTypes{store: store, crd: map[schema.GroupVersionKind]crdConverter{}}
}

func (o *offlineTypes) builtinConverter() managedfields.TypeConverter {
	o.builtinOnce.Do(func() { o.builtin = applyconfigurations.NewTypeConverter(scheme.Scheme) })
	return o.builtin
}

// knows reports whether a converter has a schema for gvk, the way the API server's
// TypeConverterManager asks: by converting an empty object of that kind.
func knows(tc managedfields.TypeConverter, gvk schema.GroupVersionKind) bool {
	stub := &unstructured.Unstructured{}
	stub.SetGroupVersionKind(gvk)
	_, err := tc.ObjectToTyped(stub)
	return err == nil
}

func (o *offlineTypes) TypeConverter(gvk schema.GroupVersionKind) (managedfields.TypeConverter, error) {
	if scheme.Scheme.Recognizes(gvk) {
		if tc := o.builtinConverter(); knows(tc, gvk) {
			return tc, nil
		}
	}

	o.mu.Lock()
	defer o.mu.Unlock()
	if c, ok := o.crd[gvk]; ok {
		return c.tc, c.err
	}
	tc, err := o.fromCRD(gvk)
	o.crd[gvk] = crdConverter{tc, err}
	return tc, err
}

// fromCRD builds a converter from a CRD's schema as the API server does for custom
// resources: the CRD's OpenAPI v3 document, merged with the built-in definitions it refers
// to (ObjectMeta and the like).
func (o *offlineTypes) fromCRD(gvk schema.GroupVersionKind) (managedfields.TypeConverter, error) {
	if props, ok := subresourceKinds[gvk]; ok {
		return subresourceConverter(gvk, props)
	}
	noSchema := fmt.Errorf("no schema for kind %s (%s): pass its CustomResourceDefinition with --context", gvk.Kind, gvk.GroupVersion())
	if o.store == nil {
		return nil, noSchema
	}
	raw, ok := o.store.CRD(gvk.Group, gvk.Kind)
	if !ok {
		return nil, noSchema
	}
	data, err := json.Marshal(raw)
	if err != nil {
		return nil, fmt.Errorf("CustomResourceDefinition of %s: %w", gvk, err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := json.Unmarshal(data, &crd); err != nil {
		return nil, fmt.Errorf("CustomResourceDefinition of %s: %w", gvk, err)
	}
	return converterFromCRD(&crd, gvk)
}

// converterFromCRD builds the converter of one version of a CRD.
func converterFromCRD(crd *apiextensionsv1.CustomResourceDefinition, gvk schema.GroupVersionKind) (managedfields.TypeConverter, error) {
	served := false
	for _, v := range crd.Spec.Versions {
		if v.Name == gvk.Version {
			served = true
		}
	}
	if !served {
		return nil, fmt.Errorf("the CustomResourceDefinition %s has no version %s", crd.Name, gvk.Version)
	}
	doc, err := builder.BuildOpenAPIV3(crd, gvk.Version, builder.Options{})
	if err != nil {
		return nil, fmt.Errorf("schema of %s from its CustomResourceDefinition: %w", gvk, err)
	}
	merged, err := builder.MergeSpecsV3(staticSpec(), doc)
	if err != nil {
		return nil, fmt.Errorf("schema of %s from its CustomResourceDefinition: %w", gvk, err)
	}
	tc, err := managedfields.NewTypeConverter(merged.Components.Schemas, crd.Spec.PreserveUnknownFields)
	if err != nil {
		return nil, fmt.Errorf("schema of %s from its CustomResourceDefinition: %w", gvk, err)
	}
	return tc, nil
}

// staticSpec is an OpenAPI v3 document with no definitions of its own; the CRD builder
// embeds the apimachinery definitions (ObjectMeta, ...) it refers to.
func staticSpec() *spec3.OpenAPI {
	return &spec3.OpenAPI{Version: "3.0.0", Components: &spec3.Components{}}
}

// chainTypes asks each source in turn; the first error is the answer when none knows
// the kind.
type chainTypes []TypeConverterSource

func (c chainTypes) TypeConverter(gvk schema.GroupVersionKind) (managedfields.TypeConverter, error) {
	var first error
	for _, s := range c {
		tc, err := s.TypeConverter(gvk)
		if err == nil {
			return tc, nil
		}
		if first == nil {
			first = err
		}
	}
	return nil, first
}
