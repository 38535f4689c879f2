package katalog

import (
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/morph-dev/morph/internal/engine"
	"github.com/morph-dev/morph/internal/objects"
)

// StatsRoute is the route under which the webhook server serves an entry's statistics
// (spec 003: GET /katalog/<entry>).
const StatsRoute = "katalog"

// The functions in this file describe a compiled Katalog entry to the surfaces: its
// targets, the resources its webhook rules name, whether it takes part in admission, the
// statistics served at /katalog/<entry>, and spec 000's wording of its failures.

// compiled is the entry's mutation as the engine runs it: once per request
// (ReinvokeNever: Katalog rules apply once, in order), never blocking admission
// (FailIgnore), at admission unless webhooks.mutation is false, and always when its
// objects are reconciled (engine.Request.Reconcile).
func (m *Mutator) compiled() engine.Mutator {
	e := m.entry
	t := e.APITypes
	return engine.Mutator{
		Descriptor: engine.Descriptor{
			ID:        e.id,
			Targets:   []engine.Target{{Group: t.Group, Version: t.Version, Kind: t.Kind, Operations: e.operations}},
			Resources: []schema.GroupVersionResource{t.GroupVersionResource()},
			// The custom resource's CRD types the defaults (schemaType).
			Needs:           []schema.GroupVersionResource{objects.CRDResource},
			Reinvocation:    engine.ReinvokeNever,
			FailurePolicy:   engine.FailIgnore,
			AdmissionOff:    !e.Webhook.Mutation,
			MutateFirst:     e.MutateFirst,
			Reconciled:      true,
			Stats:           entryStats([]*Entry{e}),
			DescribeFailure: AdmissionErrorLog,
		},
		Mutate: m.Mutate,
	}
}

// compiled is the entry's validation: on CREATE and UPDATE, at admission unless
// webhooks.validation is false (the validating webhook fails closed: the API server
// refuses an object it cannot validate).
func (v *Validator) compiled() engine.Validator {
	e := v.entry
	t := e.APITypes
	ops, _ := engine.OperationsOf(string(engine.Create), string(engine.Update))
	return engine.Validator{
		Descriptor: engine.Descriptor{
			ID:            e.id,
			Targets:       []engine.Target{{Group: t.Group, Version: t.Version, Kind: t.Kind, Operations: ops}},
			Resources:     []schema.GroupVersionResource{t.GroupVersionResource()},
			FailurePolicy: engine.FailClose,
			AdmissionOff:  !e.Webhook.Validation,
			MutateFirst:   e.MutateFirst,
			Stats:         entryStats([]*Entry{e}),
		},
		Validate: v.Validate,
	}
}

// compiled is the converter of a group and kind. Its statistics are those of every
// entry of the group and kind (the entry owning the paths and its participants).
func (c *Converter) compiled() engine.Converter {
	conv := engine.Converter{
		Descriptor: engine.Descriptor{ID: c.id, Stats: entryStats(c.members)},
		GroupKind:  c.gk,
		Convert:    c.Convert,
	}
	for _, e := range c.members {
		if e.Conversion != nil && e.Conversion.UpdateCRD {
			conv.UpdateCRD = true
		}
		if conv.CRD == "" && e.APITypes.Plural != "" {
			conv.CRD = e.APITypes.Plural + "." + e.APITypes.Group
		}
	}
	return conv
}

func entryStats(entries []*Entry) *engine.Stats {
	return &engine.Stats{Route: StatsRoute, Entries: func() map[string]any {
		out := make(map[string]any, len(entries))
		for _, e := range entries {
			out[e.Name] = e.Status()
		}
		return out
	}}
}
