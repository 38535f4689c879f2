package objects

import "k8s.io/apimachinery/pkg/runtime/schema"

// The resources of the context objects most policies read, as engine.Descriptor.Needs
// names them.
var (
	NamespaceResource = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
	CRDResource       = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
)

// BuiltinKind reports whether this package knows the scope of group and kind without a
// CRD: one of the built-in kinds it lists.
func BuiltinKind(group, kind string) bool {
	if clusterScoped[schema.GroupKind{Group: group, Kind: kind}] {
		return true
	}
	for gr, k := range builtinResources {
		if gr.Group == group && k == kind {
			return true
		}
	}
	return false
}

// builtinResources maps the resources of the built-in kinds that policies name most to
// their kinds. Resources not listed fall back to CRDs in the store.
var builtinResources = map[schema.GroupResource]string{
	{Resource: "pods"}:                                                     "Pod",
	{Resource: "configmaps"}:                                               "ConfigMap",
	{Resource: "secrets"}:                                                  "Secret",
	{Resource: "services"}:                                                 "Service",
	{Resource: "serviceaccounts"}:                                          "ServiceAccount",
	{Resource: "namespaces"}:                                               "Namespace",
	{Resource: "nodes"}:                                                    "Node",
	{Resource: "persistentvolumeclaims"}:                                   "PersistentVolumeClaim",
	{Resource: "persistentvolumes"}:                                        "PersistentVolume",
	{Resource: "endpoints"}:                                                "Endpoints",
	{Resource: "events"}:                                                   "Event",
	{Resource: "limitranges"}:                                              "LimitRange",
	{Resource: "resourcequotas"}:                                           "ResourceQuota",
	{Resource: "replicationcontrollers"}:                                   "ReplicationController",
	{Group: "apps", Resource: "deployments"}:                               "Deployment",
	{Group: "apps", Resource: "statefulsets"}:                              "StatefulSet",
	{Group: "apps", Resource: "daemonsets"}:                                "DaemonSet",
	{Group: "apps", Resource: "replicasets"}:                               "ReplicaSet",
	{Group: "batch", Resource: "jobs"}:                                     "Job",
	{Group: "batch", Resource: "cronjobs"}:                                 "CronJob",
	{Group: "networking.k8s.io", Resource: "ingresses"}:                    "Ingress",
	{Group: "networking.k8s.io", Resource: "networkpolicies"}:              "NetworkPolicy",
	{Group: "policy", Resource: "poddisruptionbudgets"}:                    "PodDisruptionBudget",
	{Group: "autoscaling", Resource: "horizontalpodautoscalers"}:           "HorizontalPodAutoscaler",
	{Group: "rbac.authorization.k8s.io", Resource: "roles"}:                "Role",
	{Group: "rbac.authorization.k8s.io", Resource: "rolebindings"}:         "RoleBinding",
	{Group: "rbac.authorization.k8s.io", Resource: "clusterroles"}:         "ClusterRole",
	{Group: "rbac.authorization.k8s.io", Resource: "clusterrolebindings"}:  "ClusterRoleBinding",
	{Group: "apiextensions.k8s.io", Resource: "customresourcedefinitions"}: "CustomResourceDefinition",
}

// clusterScoped lists the built-in kinds that live outside namespaces.
var clusterScoped = map[schema.GroupKind]bool{
	{Kind: "Namespace"}:        true,
	{Kind: "Node"}:             true,
	{Kind: "PersistentVolume"}: true,
	{Kind: "ComponentStatus"}:  true,
	{Group: "rbac.authorization.k8s.io", Kind: "ClusterRole"}:                         true,
	{Group: "rbac.authorization.k8s.io", Kind: "ClusterRoleBinding"}:                  true,
	{Group: "apiextensions.k8s.io", Kind: "CustomResourceDefinition"}:                 true,
	{Group: "storage.k8s.io", Kind: "StorageClass"}:                                   true,
	{Group: "storage.k8s.io", Kind: "CSIDriver"}:                                      true,
	{Group: "storage.k8s.io", Kind: "CSINode"}:                                        true,
	{Group: "storage.k8s.io", Kind: "VolumeAttachment"}:                               true,
	{Group: "scheduling.k8s.io", Kind: "PriorityClass"}:                               true,
	{Group: "node.k8s.io", Kind: "RuntimeClass"}:                                      true,
	{Group: "networking.k8s.io", Kind: "IngressClass"}:                                true,
	{Group: "certificates.k8s.io", Kind: "CertificateSigningRequest"}:                 true,
	{Group: "admissionregistration.k8s.io", Kind: "MutatingWebhookConfiguration"}:     true,
	{Group: "admissionregistration.k8s.io", Kind: "ValidatingWebhookConfiguration"}:   true,
	{Group: "admissionregistration.k8s.io", Kind: "MutatingAdmissionPolicy"}:          true,
	{Group: "admissionregistration.k8s.io", Kind: "MutatingAdmissionPolicyBinding"}:   true,
	{Group: "admissionregistration.k8s.io", Kind: "ValidatingAdmissionPolicy"}:        true,
	{Group: "admissionregistration.k8s.io", Kind: "ValidatingAdmissionPolicyBinding"}: true,
	{Group: "apiregistration.k8s.io", Kind: "APIService"}:                             true,
	{Group: "mutations.gatekeeper.sh", Kind: "Assign"}:                                true,
	{Group: "mutations.gatekeeper.sh", Kind: "AssignMetadata"}:                        true,
	{Group: "mutations.gatekeeper.sh", Kind: "ModifySet"}:                             true,
	{Group: "mutations.gatekeeper.sh", Kind: "AssignImage"}:                           true,
	{Group: "policies.kyverno.io", Kind: "MutatingPolicy"}:                            true,
}

// Namespaced reports whether objects of group and kind live in namespaces: from a CRD's
// scope when the store has one, else from the built-in cluster-scoped kinds.
func (s *Store) Namespaced(group, kind string) bool {
	if crd, ok := s.CRD(group, kind); ok {
		return str(crd, "spec", "scope") != "Cluster"
	}
	return !clusterScoped[schema.GroupKind{Group: group, Kind: kind}]
}
