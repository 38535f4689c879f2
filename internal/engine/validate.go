package engine

import (
	"context"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Violation is one failed validation rule.
type Violation struct {
	ID      ID
	Field   string
	Message string
	// Deny refuses the object; otherwise the violation is a warning.
	Deny bool
}

// ValidateFunc checks an object. Its error means the checks could not run, never that
// the object is bad: that is a Violation.
type ValidateFunc func(ctx context.Context, req *Request, obj map[string]any) ([]Violation, error)

// Validator is one compiled set of validation rules (Katalog validation): its
// descriptor and its one validate function.
type Validator struct {
	Descriptor
	Validate ValidateFunc
}

// Validators is an ordered collection of validators.
type Validators struct {
	all []Validator
}

// NewValidators orders validators by ID.
func NewValidators(vs []Validator) *Validators {
	all := slices.Clone(vs)
	slices.SortStableFunc(all, func(a, b Validator) int { return a.ID.Compare(b.ID) })
	return &Validators{all: all}
}

// Len is the number of validators.
func (v *Validators) Len() int { return len(v.all) }

// Validate runs every validator whose targets name the request's kind and operation on
// obj, in ID order. A validator's own error never denies the object: its checks are
// skipped, and it is returned in failures (the validator's ID and error, for the caller
// to log and count) and worded in warnings (texts for the user, one per failure).
func (v *Validators) Validate(ctx context.Context, req *Request, obj map[string]any) (violations []Violation, warnings []string, failures []Failure) {
	return v.ValidateSome(ctx, req, obj, nil)
}

// ValidateSome is Validate with only the validators keep accepts (nil: all), such as
// those that ask to validate after mutation when an object is reconciled.
func (v *Validators) ValidateSome(ctx context.Context, req *Request, obj map[string]any, keep func(Descriptor) bool) (violations []Violation, warnings []string, failures []Failure) {
	for i := range v.all {
		val := &v.all[i]
		if (keep != nil && !keep(val.Descriptor)) || !targetsMatch(val.Targets, req.Kind, req.Operation) || !Applies(&val.Descriptor, req) {
			continue
		}
		if err := Stopped(ctx); err != nil {
			// Past the request's deadline no check runs: the caller answers as the
			// validators' failure policies say (see Validators.FailClose).
			failures = append(failures, Failure{ID: val.ID, Err: err})
			warnings = append(warnings, fmt.Sprintf("%s: validation skipped: %v", val.ID, err))
			continue
		}
		vs, err := callValidate(ctx, req, val, obj)
		if err != nil {
			failures = append(failures, Failure{ID: val.ID, Err: err})
			warnings = append(warnings, fmt.Sprintf("%s: validation skipped: %v", val.ID, err))
			continue
		}
		violations = append(violations, vs...)
	}
	return violations, warnings, failures
}

func targetsMatch(ts []Target, gvk schema.GroupVersionKind, op Operation) bool {
	for _, t := range ts {
		if t.matches(gvk, op) {
			return true
		}
	}
	return false
}

// callValidate runs one validator under its timeout and the request's deadline, turning
// a panic into an error.
func callValidate(ctx context.Context, req *Request, val *Validator, obj map[string]any) (vs []Violation, err error) {
	ctx, done := callContext(ctx, &val.Descriptor)
	defer done()
	defer func() {
		if r := recover(); r != nil {
			vs, err = nil, fmt.Errorf("panic: %v", r)
		}
	}()
	vs, err = val.Validate(ctx, req, obj)
	if lateErr := late(ctx); lateErr != nil {
		return nil, lateErr
	}
	return vs, err
}

// FailClose reports whether any validator that applies to req fails closed: a request
// whose validation could not finish is then refused.
func (v *Validators) FailClose(req *Request) bool {
	for i := range v.all {
		val := &v.all[i]
		if val.FailurePolicy == FailClose && targetsMatch(val.Targets, req.Kind, req.Operation) && Applies(&val.Descriptor, req) {
			return true
		}
	}
	return false
}

// ConvertFunc returns obj at toAPIVersion ("group/version"). obj is not modified.
type ConvertFunc func(ctx context.Context, obj map[string]any, toAPIVersion string) (map[string]any, error)

// Converter converts objects of one group and kind between the versions it knows (CRD
// conversion, Katalog conversion paths): its descriptor, the group and kind, and its one
// convert function. Convert through Conversions.Convert, which applies the budgets and
// the checks every surface needs.
type Converter struct {
	Descriptor
	GroupKind schema.GroupKind
	// CRD names the CustomResourceDefinition whose conversion webhook this converter
	// serves ("<plural>.<group>"), when known.
	CRD string
	// UpdateCRD asks a cluster surface to keep that CRD's conversion webhook caBundle
	// current (Katalog updateCRD, spec 003).
	UpdateCRD bool
	Convert   ConvertFunc
}
