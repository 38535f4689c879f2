package katalog

import (
	"encoding/json"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/morph-dev/morph/internal/engine"
	"github.com/morph-dev/morph/internal/policy"
)

// Entry is one compiled CRD entry of a Katalog: what the webhook server, the cluster
// code and the CLI need to know about it. Treat it as read-only.
type Entry struct {
	// Katalog is the name of the Katalog that declares the entry.
	Katalog string
	// Name is the entry's name (its key in spec.crds, or its name field).
	Name     string
	APITypes APITypes
	Webhook  Webhook
	// MutateFirst orders the two at reconcile time: false (the default) validates
	// first and mutates valid objects; true mutates first, for defaults that are needed
	// to pass validation. At admission, mutation always runs before validation.
	MutateFirst bool
	// Conversion is nil when the entry declares no conversion.
	Conversion *Conversion

	id         engine.ID
	doc        policy.Document
	field      string
	operations engine.OperationSet
	rules      []*rule
	validation []*validationRule
	stats      *ConversionStats
	budget     Budget
}

// APITypes names the custom resource of an entry.
type APITypes struct {
	Group, Version, Kind, Plural string
}

// GroupVersionKind of the custom resource.
func (t APITypes) GroupVersionKind() schema.GroupVersionKind {
	return schema.GroupVersionKind{Group: t.Group, Version: t.Version, Kind: t.Kind}
}

// GroupVersionResource of the custom resource.
func (t APITypes) GroupVersionResource() schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: t.Group, Version: t.Version, Resource: t.Plural}
}

// Webhook is an entry's admission participation.
type Webhook struct {
	// Mutation includes the entry in the MutatingWebhookConfiguration (default: true when
	// the entry declares mutation rules).
	Mutation bool
	// Validation includes the entry in the ValidatingWebhookConfiguration (default: true
	// when the entry declares validation rules).
	Validation bool
	// Operations trigger mutation (default CREATE and UPDATE).
	Operations []engine.Operation
}

// Conversion is an entry's conversion declaration (spec 003).
type Conversion struct {
	// StorageVersion is the version objects are stored at; conversions with no direct
	// path go through it.
	StorageVersion string
	// UpdateCRD asks the cluster code to keep the CRD's conversion caBundle current.
	UpdateCRD bool
	// Participant joins the entry to the conversion pair of its group and kind without
	// declaring paths (the other entry owns them).
	Participant bool
	Paths       []*ConversionPath
}

// ConversionPath converts from one version to another.
type ConversionPath struct {
	From, To string
	fields   []*pathField
}

// ID is the engine ID of the entry's mutator and validator.
func (e *Entry) ID() engine.ID { return e.id }

// EventReason is the reason of the entry's reconcile-time events, as in spec 000:
// WebsiteMutation.
func (e *Entry) EventReason() string { return e.APITypes.Kind + "Mutation" }

// HasMutation reports whether the entry declares mutation rules.
func (e *Entry) HasMutation() bool { return len(e.rules) > 0 }

// HasValidation reports whether the entry declares validation rules.
func (e *Entry) HasValidation() bool { return len(e.validation) > 0 }

// Stats returns the entry's conversion statistics, or nil when it declares no
// conversion.
func (e *Entry) Stats() *ConversionStats { return e.stats }

// Status is the document the server serves at /katalog/<entry>.
type Status struct {
	Name       string             `json:"name"`
	Katalog    string             `json:"katalog"`
	Group      string             `json:"group"`
	Version    string             `json:"version"`
	Kind       string             `json:"kind"`
	Plural     string             `json:"plural"`
	Conversion ConversionSnapshot `json:"conversion"`
}

// Status snapshots the entry; Conversion.Enabled is false when it declares no
// conversion.
func (e *Entry) Status() Status {
	s := Status{Name: e.Name, Katalog: e.Katalog, Group: e.APITypes.Group, Version: e.APITypes.Version, Kind: e.APITypes.Kind, Plural: e.APITypes.Plural}
	if e.stats != nil {
		s.Conversion = e.stats.Snapshot()
	}
	return s
}

// StatusJSON encodes Status, with the conversion statistics in spec 003's shape under
// "conversion".
func (e *Entry) StatusJSON() ([]byte, error) { return json.Marshal(e.Status()) }
