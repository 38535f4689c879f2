package policy

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/morph-dev/morph/internal/engine"
)

// Bundle is what a dialect compiled from its documents.
type Bundle struct {
	Mutators   []engine.Mutator
	Finalizers []engine.Finalizer
	Validators []engine.Validator
	Converters []engine.Converter
	// Warnings are load-time problems that did not reject a policy outright (a mutator
	// skipped for a schema conflict, a rule that does nothing), each naming the policy.
	Warnings []string
	// Skipped are the policies that compiled but are not served (a Gatekeeper mutator
	// in a schema conflict): the fact a surface acts on (the cluster's Ready=False,
	// reason Skipped), where Warnings are the text for users.
	Skipped []Skipped
}

// Skipped is a policy left out of a Bundle although it compiled: its document, and
// why (the text of its warnings).
type Skipped struct {
	Doc    Document
	Reason string
}

// Add appends another bundle's contents.
func (b *Bundle) Add(o *Bundle) {
	if o == nil {
		return
	}
	b.Mutators = append(b.Mutators, o.Mutators...)
	b.Finalizers = append(b.Finalizers, o.Finalizers...)
	b.Validators = append(b.Validators, o.Validators...)
	b.Converters = append(b.Converters, o.Converters...)
	b.Warnings = append(b.Warnings, o.Warnings...)
	b.Skipped = append(b.Skipped, o.Skipped...)
}

// Dialect compiles the policy documents of one language.
type Dialect interface {
	// Name is the dialect's short name ("gatekeeper", "cel", "katalog").
	Name() string
	// Handles reports whether a document of this apiVersion and kind is one of the
	// dialect's policies.
	Handles(apiVersion, kind string) bool
	// Compile compiles all of the dialect's documents together (some checks, such as
	// Gatekeeper's schema conflicts, span documents). A rejected policy is an error
	// located with Document.Err (an *Error); the other policies are still returned.
	Compile(docs []Document) (*Bundle, error)
}

// GroupKinds is implemented by a dialect that owns API groups: it returns every kind of
// each group, the ones it compiles and the ones it leaves alone. A document of such a
// group whose kind is none of them (`Assing`, `MutatingPolicyy`) is refused as a
// misspelling instead of being taken for a context object and silently ignored.
type GroupKinds interface {
	GroupKinds() map[string][]string
}

// misspelled returns the kinds of the document's group when a dialect owns the group
// and the kind is not one of them.
func (l *Loader) misspelled(d Document) ([]string, bool) {
	group := Group(d.APIVersion())
	for _, dl := range l.dialects {
		gk, ok := dl.(GroupKinds)
		if !ok {
			continue
		}
		kinds, owned := gk.GroupKinds()[group]
		if owned && !slices.Contains(kinds, d.Kind()) && !slices.Contains(kinds, strings.TrimSuffix(d.Kind(), "List")) {
			return kinds, true
		}
	}
	return nil, false
}

// Loader routes documents to dialects.
type Loader struct {
	dialects []Dialect
}

// NewLoader returns a loader for the given dialects.
func NewLoader(dialects ...Dialect) *Loader { return &Loader{dialects: dialects} }

// Group returns the API group of an apiVersion ("" for the core group).
func Group(apiVersion string) string {
	if i := strings.IndexByte(apiVersion, '/'); i >= 0 {
		return apiVersion[:i]
	}
	return ""
}

// Load compiles the policy documents. Documents no dialect handles are returned as
// others (a policy folder may hold context objects such as CRDs or params). The error
// joins every rejected policy; the bundle holds everything that compiled.
func (l *Loader) Load(docs []Document) (*Bundle, []Document, error) {
	byDialect := make([][]Document, len(l.dialects))
	var others []Document
	var errs []error
	for _, d := range docs {
		if d.APIVersion() == "" || d.Kind() == "" {
			errs = append(errs, d.Err(required(d)...))
			continue
		}
		routed := false
		for i, dl := range l.dialects {
			if dl.Handles(d.APIVersion(), d.Kind()) {
				byDialect[i] = append(byDialect[i], d)
				routed = true
				break
			}
		}
		if !routed {
			if kinds, bad := l.misspelled(d); bad {
				errs = append(errs, d.Err(field.Invalid(field.NewPath("kind"), d.Kind(), fmt.Sprintf("not a kind of %s; use one of its kinds: %s", Group(d.APIVersion()), strings.Join(kinds, ", ")))))
				continue
			}
			others = append(others, d)
		}
	}
	out := &Bundle{}
	for i, dl := range l.dialects {
		if len(byDialect[i]) == 0 {
			continue
		}
		b, err := dl.Compile(byDialect[i])
		out.Add(b)
		if err != nil {
			errs = append(errs, err)
		}
	}
	return out, others, JoinDocuments(errs...)
}

// required is what a document lacks to be a Kubernetes object.
func required(d Document) field.ErrorList {
	var out field.ErrorList
	if d.APIVersion() == "" {
		out = append(out, field.Required(field.NewPath("apiVersion"), "not a Kubernetes object; give apiVersion and kind"))
	}
	if d.Kind() == "" {
		out = append(out, field.Required(field.NewPath("kind"), "not a Kubernetes object; give apiVersion and kind"))
	}
	return out
}

// Known reports whether some dialect handles the document, or the document is of a
// dialect's own group with a kind the group does not have (which Load refuses).
func (l *Loader) Known(d Document) bool {
	for _, dl := range l.dialects {
		if dl.Handles(d.APIVersion(), d.Kind()) {
			return true
		}
	}
	_, bad := l.misspelled(d)
	return bad
}

// Errors splits a joined error into its parts, for printing one per line.
func Errors(err error) []error {
	if err == nil {
		return nil
	}
	var joined interface{ Unwrap() []error }
	if errors.As(err, &joined) {
		if _, ok := joined.(*Error); ok {
			return []error{err} // a document's errors print together
		}
		var out []error
		for _, e := range joined.Unwrap() {
			out = append(out, Errors(e)...)
		}
		return out
	}
	return []error{err}
}

// ErrNoPolicies is returned when the given paths hold no policy at all.
var ErrNoPolicies = fmt.Errorf("no policies found: give files or folders holding Gatekeeper mutators, MutatingPolicies, MutatingAdmissionPolicies or Katalogs")
