package katalog

import "k8s.io/apimachinery/pkg/runtime/schema"

// The methods in this file are what the webhook server reads from a compiled Katalog
// through its small optional interfaces (see internal/webhook's package doc): the
// resources a webhook rule names, whether an entry takes part in admission, and the
// statistics served at /katalog/<entry>.

// Resources is the entry's resource, with the plural apiTypes declares.
func (m *Mutator) Resources() []schema.GroupVersionResource {
	return []schema.GroupVersionResource{m.entry.APITypes.GroupVersionResource()}
}

// AppliesAtAdmission is webhooks.mutation: false keeps the entry out of the mutating
// webhook configuration and of /mutate; offline and reconcile-time mutation still run.
func (m *Mutator) AppliesAtAdmission() bool { return m.entry.Webhook.Mutation }

// DescribeFailure is spec 000's log line for a failed entry at admission.
func (m *Mutator) DescribeFailure(kind, name string, err error) string {
	return AdmissionErrorLog(kind, name, err)
}

// EntryStats is the /katalog/<entry> document of the entry.
func (m *Mutator) EntryStats() map[string]any { return entryStats(m.entries()) }

// Resources is the entry's resource, with the plural apiTypes declares.
func (v *Validator) Resources() []schema.GroupVersionResource {
	return []schema.GroupVersionResource{v.entry.APITypes.GroupVersionResource()}
}

// EntryStats is the /katalog/<entry> document of the entry.
func (v *Validator) EntryStats() map[string]any { return entryStats(v.entries()) }

// EntryStats are the /katalog/<entry> documents of every entry of the converter's
// group and kind (the entry owning the paths and its participants).
func (c *Converter) EntryStats() map[string]any { return entryStats(c.entries()) }

func entryStats(entries []*Entry) map[string]any {
	out := make(map[string]any, len(entries))
	for _, e := range entries {
		out[e.Name] = e.Status()
	}
	return out
}

// AppliesAtAdmission is webhooks.validation: false keeps the entry out of the validating
// webhook configuration and of /validate; offline and reconcile-time validation still run.
func (v *Validator) AppliesAtAdmission() bool { return v.entry.Webhook.Validation }
