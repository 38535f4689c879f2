// Package crds defines the CustomResourceDefinitions of the policy kinds morph serves
// from a cluster, written for morph (not copied from Gatekeeper or Kyverno): Gatekeeper
// mutators and external data providers, Kyverno MutatingPolicies with their exceptions,
// and Katalogs. `morph generate crds` prints them and the Helm chart reuses them.
//
// The schemas are structural and describe the fields morph reads, so that the API
// server's field validation (kubectl's default --validate=strict) rejects a misspelt
// field instead of pruning it. Only free-form content keeps unknown fields: object
// values (a Gatekeeper assign.value, a ModifySet value), and a Katalog's spec.crds, which
// spec 000 writes in two shapes (a list of entries or a map of entries by name).
//
// Every kind has a status subresource, where morph's status writer records whether the
// policy compiled (condition Ready). Every CRD carries the label
// app.kubernetes.io/managed-by=morph: morph installs and updates only CRDs with that
// label and uses any other CRD of the same name (Gatekeeper's, Kyverno's) as it is.
package crds

import (
	"bytes"
	"fmt"
	"io"
	"slices"
	"strings"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"
)

// The label that marks a CRD as morph's.
const (
	ManagedByLabel = "app.kubernetes.io/managed-by"
	ManagedByValue = "morph"
)

// Kind is one policy kind morph serves from the cluster.
type Kind struct {
	Group, Kind, Plural string
	// Namespaced is true for namespaced kinds (NamespacedMutatingPolicy, PolicyException).
	Namespaced bool
	// Versions are the served versions, Storage the stored one.
	Versions []string
	Storage  string
}

// Resource is the kind's group and resource at its storage version, the version morph
// watches.
func (k Kind) Resource() schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: k.Group, Version: k.Storage, Resource: k.Plural}
}

// GroupKind is the kind's group and kind.
func (k Kind) GroupKind() schema.GroupKind { return schema.GroupKind{Group: k.Group, Kind: k.Kind} }

// CRDName is the name of the kind's CustomResourceDefinition (plural.group).
func (k Kind) CRDName() string { return k.Plural + "." + k.Group }

type definition struct {
	Kind
	short []string
	spec  apiextv1.JSONSchemaProps
}

var (
	gatekeeperVersions = []string{"v1", "v1beta1", "v1alpha1"}
	kyvernoVersions    = []string{"v1", "v1beta1", "v1alpha1"}
)

// definitions lists every kind. Storage versions follow the projects that define the
// kinds, so that objects stored through morph's CRD read back the same through
// Gatekeeper's or Kyverno's: Gatekeeper stores mutators as v1 and AssignImage (only
// v1alpha1 there) as v1alpha1, Provider as v1beta1; Kyverno stores its policies as v1beta1.
func definitions() []definition {
	return []definition{
		{Kind: Kind{Group: "mutations.gatekeeper.sh", Kind: "Assign", Plural: "assign", Versions: gatekeeperVersions, Storage: "v1"},
			spec: gatekeeperSpec(true, assignParameters())},
		{Kind: Kind{Group: "mutations.gatekeeper.sh", Kind: "AssignMetadata", Plural: "assignmetadata", Versions: gatekeeperVersions, Storage: "v1"},
			spec: gatekeeperSpec(false, object(props{"assign": assignValue()}))},
		{Kind: Kind{Group: "mutations.gatekeeper.sh", Kind: "ModifySet", Plural: "modifyset", Versions: gatekeeperVersions, Storage: "v1"},
			spec: gatekeeperSpec(true, modifySetParameters())},
		{Kind: Kind{Group: "mutations.gatekeeper.sh", Kind: "AssignImage", Plural: "assignimage", Versions: gatekeeperVersions, Storage: "v1alpha1"},
			spec: gatekeeperSpec(true, assignImageParameters())},
		{Kind: Kind{Group: "externaldata.gatekeeper.sh", Kind: "Provider", Plural: "providers", Versions: []string{"v1beta1", "v1alpha1"}, Storage: "v1beta1"},
			spec: providerSpec()},
		{Kind: Kind{Group: "policies.kyverno.io", Kind: "MutatingPolicy", Plural: "mutatingpolicies", Versions: kyvernoVersions, Storage: "v1beta1"},
			short: []string{"mpol"}, spec: mutatingPolicySpec()},
		{Kind: Kind{Group: "policies.kyverno.io", Kind: "NamespacedMutatingPolicy", Plural: "namespacedmutatingpolicies", Namespaced: true, Versions: kyvernoVersions, Storage: "v1beta1"},
			short: []string{"nmpol"}, spec: mutatingPolicySpec()},
		{Kind: Kind{Group: "policies.kyverno.io", Kind: "PolicyException", Plural: "policyexceptions", Namespaced: true, Versions: kyvernoVersions, Storage: "v1beta1"},
			spec: policyExceptionSpec()},
		{Kind: Kind{Group: "orkestra.orkspace.io", Kind: "Katalog", Plural: "katalogs", Versions: []string{"v1"}, Storage: "v1"},
			spec: katalogSpec()},
	}
}

// Kinds lists every policy kind morph serves from the cluster, in the order of All.
func Kinds() []Kind {
	defs := definitions()
	out := make([]Kind, len(defs))
	for i, d := range defs {
		out[i] = d.Kind
	}
	return out
}

// All returns a fresh copy of every CRD, in a fixed order (Gatekeeper, Kyverno, Katalog,
// then morph's own BackgroundRequest).
func All() []*apiextv1.CustomResourceDefinition {
	defs := definitions()
	out := make([]*apiextv1.CustomResourceDefinition, len(defs), len(defs)+1)
	for i, d := range defs {
		out[i] = d.crd()
	}
	return append(out, backgroundRequestCRD())
}

// Write prints every CRD as multi-document YAML, for kubectl apply.
func Write(w io.Writer) error {
	var buf bytes.Buffer
	for i, crd := range All() {
		obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(crd)
		if err != nil {
			return fmt.Errorf("encoding CRD %s: %w", crd.Name, err)
		}
		delete(obj, "status") // the API server's to write
		data, err := yaml.Marshal(obj)
		if err != nil {
			return fmt.Errorf("encoding CRD %s: %w", crd.Name, err)
		}
		if i > 0 {
			buf.WriteString("---\n")
		}
		buf.Write(data)
	}
	_, err := w.Write(buf.Bytes())
	return err
}

// IsOurs reports whether a CRD carries morph's label.
func IsOurs(labels map[string]string) bool { return labels[ManagedByLabel] == ManagedByValue }

func (d definition) crd() *apiextv1.CustomResourceDefinition {
	scope := apiextv1.ClusterScoped
	if d.Namespaced {
		scope = apiextv1.NamespaceScoped
	}
	root := object(props{
		"apiVersion": str(""),
		"kind":       str(""),
		"metadata":   {Type: "object"},
		"spec":       d.spec,
		"status":     statusSchema(),
	})
	root.Description = fmt.Sprintf("%s is a policy morph serves from the cluster (morph generate crds).", d.Kind.Kind)
	crd := &apiextv1.CustomResourceDefinition{
		TypeMeta: metav1.TypeMeta{APIVersion: "apiextensions.k8s.io/v1", Kind: "CustomResourceDefinition"},
		ObjectMeta: metav1.ObjectMeta{
			Name:   d.CRDName(),
			Labels: map[string]string{ManagedByLabel: ManagedByValue},
		},
		Spec: apiextv1.CustomResourceDefinitionSpec{
			Group: d.Group,
			Names: apiextv1.CustomResourceDefinitionNames{
				Plural:     d.Plural,
				Singular:   strings.ToLower(d.Kind.Kind),
				Kind:       d.Kind.Kind,
				ListKind:   d.Kind.Kind + "List",
				ShortNames: d.short,
				Categories: []string{"morph"},
			},
			Scope: scope,
		},
	}
	for _, v := range d.Versions {
		schemaCopy := *root.DeepCopy()
		crd.Spec.Versions = append(crd.Spec.Versions, apiextv1.CustomResourceDefinitionVersion{
			Name:         v,
			Served:       true,
			Storage:      v == d.Storage,
			Schema:       &apiextv1.CustomResourceValidation{OpenAPIV3Schema: &schemaCopy},
			Subresources: &apiextv1.CustomResourceSubresources{Status: &apiextv1.CustomResourceSubresourceStatus{}},
			AdditionalPrinterColumns: []apiextv1.CustomResourceColumnDefinition{
				{Name: "Ready", Type: "string", JSONPath: `.status.conditions[?(@.type=="Ready")].status`},
				{Name: "Reason", Type: "string", JSONPath: `.status.conditions[?(@.type=="Ready")].reason`, Priority: 1},
				{Name: "Age", Type: "date", JSONPath: ".metadata.creationTimestamp"},
			},
		})
	}
	slices.SortStableFunc(crd.Spec.Versions, func(a, b apiextv1.CustomResourceDefinitionVersion) int {
		return strings.Compare(a.Name, b.Name)
	})
	return crd
}

// statusSchema is the status morph writes: observedGeneration and a list of conditions
// (Ready), each with the generation it describes.
func statusSchema() apiextv1.JSONSchemaProps {
	condition := object(props{
		"type":               str("Ready: whether morph compiled the policy and serves it."),
		"status":             enum("", "True", "False", "Unknown"),
		"reason":             str("Compiled, or why the policy does not compile (CompileError)."),
		"message":            str("The error morph apply prints for the same policy."),
		"observedGeneration": integer("int64", ""),
		"lastTransitionTime": {Type: "string", Format: "date-time"},
	})
	condition.Required = []string{"type", "status"}
	conditions := array(condition)
	conditions.XListType = ptr("map")
	conditions.XListMapKeys = []string{"type"}
	return object(props{
		"observedGeneration": integer("int64", "The metadata.generation the status describes."),
		"conditions":         conditions,
	})
}

// Gatekeeper mutators.

func labelSelector(description string) apiextv1.JSONSchemaProps {
	return described(goSchema[metav1.LabelSelector](), description)
}

func gatekeeperMatch() apiextv1.JSONSchemaProps {
	return described(object(props{
		"scope": enum("Namespaced, Cluster or *.", "Namespaced", "Cluster", "*"),
		"kinds": array(object(props{
			"apiGroups": stringList(""),
			"kinds":     stringList(""),
		})),
		"labelSelector":      labelSelector(""),
		"namespaceSelector":  labelSelector(""),
		"namespaces":         stringList("Namespaces, with a trailing or leading * as a glob."),
		"excludedNamespaces": stringList(""),
		"name":               str("The object's name, with a trailing or leading * as a glob."),
		"source":             enum("", "All", "Original", "Generated"),
	}), "Which objects the mutator applies to.")
}

func pathTests() apiextv1.JSONSchemaProps {
	return array(object(props{
		"subPath":   str(""),
		"condition": enum("", "MustExist", "MustNotExist"),
	}))
}

func assignValue() apiextv1.JSONSchemaProps {
	return object(props{
		"value":        anyValue("The value to assign: any JSON value."),
		"fromMetadata": object(props{"field": enum("", "namespace", "name")}),
		"externalData": object(props{
			"provider":      str(""),
			"dataSource":    enum("", "ValueAtLocation", "Username"),
			"failurePolicy": enum("", "UseDefault", "Ignore", "Fail"),
			"default":       str(""),
		}),
	})
}

func gatekeeperSpec(applyTo bool, parameters apiextv1.JSONSchemaProps) apiextv1.JSONSchemaProps {
	p := props{
		"match":      gatekeeperMatch(),
		"location":   str("The path the mutator writes, such as spec.containers[name:*].imagePullPolicy."),
		"parameters": parameters,
	}
	if applyTo {
		p["applyTo"] = array(object(props{
			"groups":     stringList(""),
			"versions":   stringList(""),
			"kinds":      stringList(""),
			"kind":       str(""),
			"operations": stringList(""),
		}))
	}
	return object(p)
}

func assignParameters() apiextv1.JSONSchemaProps {
	return object(props{"pathTests": pathTests(), "assign": assignValue()})
}

func modifySetParameters() apiextv1.JSONSchemaProps {
	return object(props{
		"pathTests": pathTests(),
		"operation": enum("", "merge", "prune"),
		"values":    object(props{"fromList": array(anyValue(""))}),
	})
}

func assignImageParameters() apiextv1.JSONSchemaProps {
	return object(props{
		"pathTests":    pathTests(),
		"assignDomain": str(""),
		"assignPath":   str(""),
		"assignTag":    str(""),
	})
}

func providerSpec() apiextv1.JSONSchemaProps {
	return object(props{
		"url":      str("The provider's HTTPS endpoint."),
		"timeout":  integer("int64", "Seconds to wait for the provider."),
		"caBundle": str("PEM (base64) of the CA that signed the provider's certificate."),
	})
}

// Kyverno policies: the MutatingAdmissionPolicy fields (from the Kubernetes types)
// plus Kyverno's own.

func mutatingPolicySpec() apiextv1.JSONSchemaProps {
	match := goSchema[admissionv1.MatchResources]()
	// Kyverno's targetMatchConstraints add an expression that selects the targets
	// (mutateExisting).
	targetMatch := *match.DeepCopy()
	targetMatch.Properties["expression"] = str("A CEL expression, in the trigger's context, returning the target or {items: [...]}.")
	return object(props{
		"matchConstraints":       match,
		"failurePolicy":          enum("", "Ignore", "Fail"),
		"matchConditions":        goSchema[[]admissionv1.MatchCondition](),
		"variables":              goSchema[[]admissionv1.Variable](),
		"mutations":              goSchema[[]admissionv1.Mutation](),
		"reinvocationPolicy":     enum("", "Never", "IfNeeded"),
		"targetMatchConstraints": targetMatch,
		"targetMatchConditions":  goSchema[[]admissionv1.MatchCondition](),
		"evaluation": object(props{
			"admission": object(props{"enabled": boolean("")}),
			"mutateExisting": object(props{
				"enabled":                boolean(""),
				"targetMatchConstraints": match,
			}),
			"mode": str(""),
		}),
		"webhookConfiguration": object(props{"timeoutSeconds": integer("int32", "")}),
		"autogen": object(props{
			"podControllers":          object(props{"controllers": stringList("")}),
			"mutatingAdmissionPolicy": object(props{"enabled": boolean("")}),
		}),
	})
}

func policyExceptionSpec() apiextv1.JSONSchemaProps {
	ref := object(props{"name": str(""), "kind": str("")})
	ref.Required = []string{"name"}
	return object(props{
		"policyRefs":      array(ref),
		"matchConditions": goSchema[[]admissionv1.MatchCondition](),
		"images":          stringList(""),
	})
}

// Katalog.

func katalogSpec() apiextv1.JSONSchemaProps {
	crds := anyValue("The CRD entries (spec 000 and 003): a list of entries with a name each, or a map of entries by name. morph checks every field of an entry itself.")
	return object(props{"crds": crds})
}
