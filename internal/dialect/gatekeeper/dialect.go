// Package gatekeeper compiles Gatekeeper and Policy Controller mutators (Assign,
// AssignMetadata, ModifySet and AssignImage of mutations.gatekeeper.sh, and external
// data Providers of externaldata.gatekeeper.sh) into engine mutators.
//
// Everything is parsed and checked at load: locations (package path), pathTests,
// match criteria, AssignImage parts, and schema conflicts between mutators. At request
// time one tree walker descends each location through the engine's copy-on-write
// Writer; each mutator kind only supplies a small setter for the end of the path.
//
// Where the sources differ, both readings are accepted: applyTo entries may spell
// "kinds" as "kind" (the Policy Controller Jobs example does), and the external data
// provider kind may be Provider (Gatekeeper's name) or ExternalDataProvider.
package gatekeeper

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/morph-dev/morph/internal/engine"
	"github.com/morph-dev/morph/internal/objects"
	"github.com/morph-dev/morph/internal/policy"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

const dialectName = "gatekeeper"

// OrderAnnotation on a mutator's metadata sets its place in the engine's order (an
// integer, default 0).
const OrderAnnotation = policy.OrderAnnotation

// Options configure the dialect.
type Options struct {
	// Objects holds context objects: Namespaces for namespaceSelector when a request
	// carries no namespace object, CRDs for match.scope of custom kinds. nil means an
	// empty store (built-in kinds only).
	Objects *objects.Store
	// MutationAnnotations adds gatekeeper.sh/mutation-id and gatekeeper.sh/mutations to
	// objects the mutators changed, as Gatekeeper's --mutation-annotations does.
	MutationAnnotations bool
	// AllowExternalData lets Assign take values from external data providers (the
	// --allow-external-data flag). Without it such a mutator is rejected at load.
	AllowExternalData bool
	// HTTPClient, when set, sends the external data requests (tests, proxies); by
	// default each provider gets a client trusting its caBundle.
	HTTPClient *http.Client
	// FailClosed makes a mutator that fails at request time fail the request, as
	// Gatekeeper's webhook does. By default the failing mutator is skipped (its changes
	// dropped) and a warning names it.
	FailClosed bool
}

// Dialect is the Gatekeeper dialect.
type Dialect struct {
	opts Options
}

// New returns the Gatekeeper dialect.
func New(opts Options) policy.Dialect {
	if opts.Objects == nil {
		opts.Objects = objects.NewStore()
	}
	return &Dialect{opts: opts}
}

// Name is "gatekeeper".
func (d *Dialect) Name() string { return dialectName }

// Handles reports whether the document is a Gatekeeper mutator or provider.
func (d *Dialect) Handles(apiVersion, kind string) bool {
	switch apiVersion {
	case "mutations.gatekeeper.sh/v1alpha1", "mutations.gatekeeper.sh/v1beta1", "mutations.gatekeeper.sh/v1":
		switch kind {
		case kindAssign, kindAssignMetadata, kindModifySet, kindAssignImage:
			return true
		}
	case "externaldata.gatekeeper.sh/v1alpha1", "externaldata.gatekeeper.sh/v1beta1":
		return kind == "Provider" || kind == "ExternalDataProvider"
	}
	return false
}

// Compile compiles all documents together: providers first, then mutators, then the
// schema conflicts between them. A rejected document is a located error; the others
// are returned.
func (d *Dialect) Compile(docs []policy.Document) (*policy.Bundle, error) {
	c := &compiler{opts: d.opts, grammar: newImageGrammar(), providers: map[string]*provider{}}
	var errs []error
	for _, doc := range docs {
		if !strings.HasPrefix(doc.APIVersion(), "externaldata.") {
			continue
		}
		p, err := c.compileProvider(doc)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if prev, dup := c.providers[p.name]; dup {
			errs = append(errs, doc.Err(policy.Duplicate(field.NewPath("metadata", "name"), p.name, fmt.Sprintf("another Provider has this name (%s); names must be unique", prev.doc.Where()))))
			continue
		}
		c.providers[p.name] = p
	}
	var ms []*mutator
	seen := map[engine.ID]*mutator{}
	for _, doc := range docs {
		if strings.HasPrefix(doc.APIVersion(), "externaldata.") {
			continue
		}
		m, err := c.compileMutator(doc)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		key := engine.ID{Dialect: dialectName, Kind: m.id.Kind, Name: m.id.Name}
		if prev, dup := seen[key]; dup {
			errs = append(errs, doc.Err(policy.Duplicate(field.NewPath("metadata", "name"), m.id.Name, fmt.Sprintf("another %s has this name (%s); names must be unique", m.id.Kind, prev.doc.Where()))))
			continue
		}
		seen[key] = m
		ms = append(ms, m)
	}
	bad, warnings := findConflicts(ms)
	b := &policy.Bundle{Warnings: warnings}
	var kept []*mutator
	for _, m := range ms {
		if why, skipped := bad[m]; skipped {
			b.Skipped = append(b.Skipped, policy.Skipped{Doc: m.doc, Reason: strings.Join(why, "\n")})
			continue
		}
		kept = append(kept, m)
		b.Mutators = append(b.Mutators, m.compiled())
	}
	usesExternal := slices.ContainsFunc(kept, func(m *mutator) bool { return m.external != nil })
	if usesExternal {
		f := newExternalFinalizer(c.refs, d.opts.HTTPClient)
		b.Finalizers = append(b.Finalizers, finalizer(f.Name(), f.Finalize))
	}
	if d.opts.MutationAnnotations && len(kept) > 0 {
		f := newAnnotationFinalizer(kept)
		b.Finalizers = append(b.Finalizers, finalizer(f.Name(), f.Finalize))
	}
	slices.SortStableFunc(b.Mutators, func(x, y engine.Mutator) int { return x.ID.Compare(y.ID) })
	return b, policy.JoinDocuments(errs...)
}

// finalizer makes an engine.Finalizer of a finalize method that returns its warnings.
func finalizer(name string, f func(context.Context, *engine.Request, map[string]any, []engine.Change, *engine.Writer) (map[string]any, []string, error)) engine.Finalizer {
	return engine.Finalizer{Name: name, Finalize: func(ctx context.Context, req *engine.Request, obj map[string]any, trace []engine.Change, w *engine.Writer) (map[string]any, error) {
		out, warnings, err := f(ctx, req, obj, trace, w)
		for _, text := range warnings {
			w.Warn(text)
		}
		return out, err
	}}
}
