package cel

import (
	"fmt"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"sigs.k8s.io/yaml"
)

// subresourceKinds are built-in kinds posted to subresources that client-go has no apply
// configurations (so no schema) for: Binding (pods/binding), Eviction (pods/eviction) and
// Scale (*/scale). Their schemas are written here, after their Go types in k8s.io/api,
// as structural schemas that the CRD schema builder turns into a converter (with
// ObjectMeta's definitions); in a cluster the API server's OpenAPI has them.
var subresourceKinds = map[schema.GroupVersionKind]string{
	{Version: "v1", Kind: "Binding"}: `
target:
  type: object
  properties:
    apiVersion: {type: string}
    fieldPath: {type: string}
    kind: {type: string}
    name: {type: string}
    namespace: {type: string}
    resourceVersion: {type: string}
    uid: {type: string}
  x-kubernetes-map-type: atomic`,
	{Group: "policy", Version: "v1", Kind: "Eviction"}: `
deleteOptions:
  type: object
  x-kubernetes-preserve-unknown-fields: true`,
	{Group: "autoscaling", Version: "v1", Kind: "Scale"}: `
spec:
  type: object
  properties:
    replicas: {type: integer, format: int32}
status:
  type: object
  properties:
    replicas: {type: integer, format: int32}
    selector: {type: string}`,
}

// subresourceConverter builds the converter of a subresource kind from its properties,
// as a CRD of that group, version and kind (offlineTypes caches it).
func subresourceConverter(gvk schema.GroupVersionKind, properties string) (managedfields.TypeConverter, error) {
	var props map[string]apiextensionsv1.JSONSchemaProps
	if err := yaml.Unmarshal([]byte(properties), &props); err != nil {
		return nil, fmt.Errorf("built-in schema of %s: %w", gvk, err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{Spec: apiextensionsv1.CustomResourceDefinitionSpec{
		Group: gvk.Group,
		Names: apiextensionsv1.CustomResourceDefinitionNames{Kind: gvk.Kind, ListKind: gvk.Kind + "List", Plural: "x", Singular: "x"},
		Scope: apiextensionsv1.NamespaceScoped,
		Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
			Name: gvk.Version, Served: true, Storage: true,
			Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{Type: "object", Properties: props}},
		}},
	}}
	return converterFromCRD(crd, gvk)
}
