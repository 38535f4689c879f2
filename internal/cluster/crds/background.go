package crds

import (
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// BackgroundRequest is morph's own kind (not a policy): the durable record of work an
// admitted request triggered for the background controller (Kyverno's UpdateRequest).
// The replica that admitted the trigger creates one in morph's namespace per triggered
// policy; the leader processes it and deletes it, so that the work survives a leader
// change. It is not among Kinds: the policy source does not watch it.
var BackgroundRequest = Kind{Group: "morph.dev", Kind: "BackgroundRequest", Plural: "backgroundrequests", Namespaced: true, Versions: []string{"v1alpha1"}, Storage: "v1alpha1"}

// BackgroundRequestResource is the resource the background controller reads and writes.
var BackgroundRequestResource = schema.GroupVersionResource{Group: BackgroundRequest.Group, Version: BackgroundRequest.Storage, Resource: BackgroundRequest.Plural}

// backgroundRequestCRD is the CustomResourceDefinition of BackgroundRequest. Its spec is
// written by morph only: the policy (its engine ID) and the trigger (the admitted
// request, as JSON), both free-form; its status counts failed attempts.
func backgroundRequestCRD() *apiextv1.CustomResourceDefinition {
	spec := object(props{
		"policy":  anyValue("The triggered policy: its engine ID (dialect, kind, namespace, name, part, order)."),
		"trigger": anyValue("The admitted request that triggered the policy (object, oldObject, operation, user)."),
	})
	spec.Required = []string{"policy", "trigger"}
	status := object(props{
		"attempts": integer("int64", "Times the leader processed the request without finishing it."),
		"message":  str("The last error, when an attempt failed."),
	})
	root := object(props{
		"apiVersion": str(""),
		"kind":       str(""),
		"metadata":   {Type: "object"},
		"spec":       spec,
		"status":     status,
	})
	root.Description = "BackgroundRequest is work an admitted request triggered for morph's background controller: created by the replica that admitted the trigger, processed and deleted by the leader."
	k := BackgroundRequest
	return &apiextv1.CustomResourceDefinition{
		TypeMeta: metav1.TypeMeta{APIVersion: "apiextensions.k8s.io/v1", Kind: "CustomResourceDefinition"},
		ObjectMeta: metav1.ObjectMeta{
			Name:   k.CRDName(),
			Labels: map[string]string{ManagedByLabel: ManagedByValue},
		},
		Spec: apiextv1.CustomResourceDefinitionSpec{
			Group: k.Group,
			Names: apiextv1.CustomResourceDefinitionNames{
				Plural:     k.Plural,
				Singular:   "backgroundrequest",
				Kind:       k.Kind,
				ListKind:   k.Kind + "List",
				ShortNames: []string{"bgr"},
				Categories: []string{"morph"},
			},
			Scope: apiextv1.NamespaceScoped,
			Versions: []apiextv1.CustomResourceDefinitionVersion{{
				Name: k.Storage, Served: true, Storage: true,
				Schema:       &apiextv1.CustomResourceValidation{OpenAPIV3Schema: &root},
				Subresources: &apiextv1.CustomResourceSubresources{Status: &apiextv1.CustomResourceSubresourceStatus{}},
				AdditionalPrinterColumns: []apiextv1.CustomResourceColumnDefinition{
					{Name: "Policy", Type: "string", JSONPath: ".spec.policy.name"},
					{Name: "Operation", Type: "string", JSONPath: ".spec.trigger.operation"},
					{Name: "Attempts", Type: "integer", JSONPath: ".status.attempts"},
					{Name: "Age", Type: "date", JSONPath: ".metadata.creationTimestamp"},
				},
			}},
		},
	}
}
