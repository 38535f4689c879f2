package cel

import (
	"context"
	"fmt"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"

	"github.com/morph-dev/morph/internal/engine"
	"github.com/morph-dev/morph/internal/policy"
)

// exception is a Kyverno PolicyException (policies.kyverno.io). As in Kyverno 1.19
// (mpol compiler, Policy.evaluate): one that lists neither images nor allowedValues
// exempts the objects that pass all its matchConditions from the policies it names; one
// that lists them does not exempt, it adds them to the policy's `exceptions` variable
// (exceptions.allowedImages, exceptions.allowedValues) for the policy's expressions.
type exception struct {
	doc             policy.Document
	name, namespace string
	refs            []policyRef
	images          []string
	allowedValues   []string
	conditions      []admissionv1.MatchCondition
	// expiresAt ends the exception (zero: never).
	expiresAt time.Time
}

type policyRef struct{ name, kind string }

// names reports whether the exception names the policy.
func (e *exception) names(id engine.ID) bool {
	for _, r := range e.refs {
		if r.name == id.Name && (r.kind == "" || r.kind == id.Kind) {
			return true
		}
	}
	return false
}

// exempts reports whether the exception exempts objects rather than allowing values.
func (e *exception) exempts() bool { return len(e.images) == 0 && len(e.allowedValues) == 0 }

// boundException is an exception with its match conditions compiled in the environment
// of one policy it names.
type boundException struct {
	*exception
	conditions []kyvernoCondition
}

func (d *dialect) compileException(doc policy.Document) (*exception, []error) {
	if err := checkVersion(doc, kyvernoVersions); err != nil {
		return nil, []error{err}
	}
	var obj exceptionDocument
	if err := decodeInto(doc, &obj, true); err != nil {
		return nil, []error{err}
	}
	var errs []error
	if err := validateName(doc); err != nil {
		errs = append(errs, err)
	}
	ex := &exception{doc: doc, name: doc.Name(), namespace: doc.Namespace(), images: obj.Spec.Images,
		allowedValues: obj.Spec.AllowedValues, conditions: obj.Spec.MatchConditions}
	if obj.Spec.ExpiresAt != nil {
		ex.expiresAt = obj.Spec.ExpiresAt.Time
	}
	if len(obj.Spec.PolicyRefs) == 0 {
		errs = append(errs, doc.Required("spec.policyRefs", "name the policies the exception applies to"))
	}
	for i, r := range obj.Spec.PolicyRefs {
		if r.Name == "" {
			errs = append(errs, doc.Required(fmt.Sprintf("spec.policyRefs[%d].name", i), "name the policy"))
		}
		ex.refs = append(ex.refs, policyRef{name: r.Name, kind: r.Kind})
	}
	for i, mc := range obj.Spec.MatchConditions {
		if mc.Name == "" {
			errs = append(errs, doc.Required(fmt.Sprintf("spec.matchConditions[%d].name", i), "give the match condition a name"))
		}
	}
	// The conditions compile in the environment of each policy the exception names
	// (bind); compiling them here in a cluster policy's environment reports their
	// errors even when no loaded policy is named.
	if _, cerrs := compileKyvernoConditions(doc, d.hosts, "", "spec.matchConditions", obj.Spec.MatchConditions); len(cerrs) > 0 {
		errs = append(errs, cerrs...)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return ex, nil
}

// bind compiles the exception's conditions for a policy of that namespace.
func (d *dialect) bindException(ex *exception, namespace string) (boundException, []error) {
	conds, errs := compileKyvernoConditions(ex.doc, d.hosts, namespace, "spec.matchConditions", ex.conditions)
	return boundException{exception: ex, conditions: conds}, errs
}

// applyExceptions evaluates the policy's exceptions on data as Kyverno does: the first
// matching exception that exempts (in name order) is returned; the images and values of
// the matching ones that do not exempt fill `exceptions`. An error of a condition fails
// the evaluation unless an exemption was found.
func applyExceptions(ctx context.Context, exs []boundException, data map[string]any) (*exception, ExceptionValues, error) {
	values := ExceptionValues{AllowedImages: []string{}, AllowedValues: []string{}}
	var exempt *exception
	now := time.Now()
	for _, ex := range exs {
		if !ex.expiresAt.IsZero() && now.After(ex.expiresAt) {
			// Expired: no longer applied, as Kyverno's IsExpired.
			continue
		}
		ok, err := matchAll(ctx, ex.conditions, data)
		if err != nil {
			if exempt != nil {
				continue
			}
			return nil, values, fmt.Errorf("PolicyException %s/%s: %w", ex.namespace, ex.name, err)
		}
		if !ok {
			continue
		}
		if ex.exempts() {
			if exempt == nil {
				exempt = ex.exception
			}
		} else if exempt == nil {
			values.AllowedImages = append(values.AllowedImages, ex.images...)
			values.AllowedValues = append(values.AllowedValues, ex.allowedValues...)
		}
	}
	return exempt, values, nil
}
