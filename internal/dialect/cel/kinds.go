package cel

// GroupKinds lists every kind of the groups the dialect reads, those it compiles and
// those it leaves alone (Kyverno's other policy types, Kubernetes' validating
// policies and webhook configurations), so that a misspelled kind (`MutatingPolicyy`)
// is refused rather than taken for a context object (policy.GroupKinds).
func (d *dialect) GroupKinds() map[string][]string {
	return map[string][]string{
		groupKyverno: {
			kindMutatingPolicy, kindNamespacedMutating, kindPolicyException,
			"ValidatingPolicy", "NamespacedValidatingPolicy", "ImageValidatingPolicy", "NamespacedImageValidatingPolicy",
			"GeneratingPolicy", "NamespacedGeneratingPolicy", "DeletingPolicy", "NamespacedDeletingPolicy",
		},
		groupAdmission: {
			kindMAP, kindMAPBinding, "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
			"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration",
		},
	}
}
