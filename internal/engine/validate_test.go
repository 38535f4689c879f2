package engine

import (
	"context"
	"errors"
	"slices"
	"testing"
)

// ruleValidator reports one violation, or fails with err.
type ruleValidator struct {
	id      ID
	targets []Target
	deny    bool
	err     error
}

func (v *ruleValidator) Validate(context.Context, *Request, map[string]any) ([]Violation, error) {
	if v.err != nil {
		return nil, v.err
	}
	return []Violation{{ID: v.id, Message: "violates " + v.id.Name, Deny: v.deny}}, nil
}

func rule(name string, opts ...func(*ruleValidator)) Validator {
	v := &ruleValidator{id: ID{Dialect: "test", Kind: "Rule", Name: name}, targets: podTarget()}
	for _, o := range opts {
		o(v)
	}
	return Validator{Descriptor: Descriptor{ID: v.id, Targets: v.targets}, Validate: v.Validate}
}

func TestValidatorsReportFailures(t *testing.T) {
	noSchema := errors.New("no schema")
	badExpression := errors.New("bad expression")
	failing := func(err error) func(*ruleValidator) { return func(v *ruleValidator) { v.err = err } }
	denying := func(v *ruleValidator) { v.deny = true }
	onDeployments := func(v *ruleValidator) {
		v.targets = []Target{{Group: "apps", Version: "v1", Kind: "Deployment", Operations: AllOperations}}
	}
	tests := []struct {
		name       string
		validators []Validator
		violations []string // IDs, in order
		warnings   []string
		failures   []Failure
	}{
		{
			name:       "violations, no failure",
			validators: []Validator{rule("b", denying), rule("a")},
			violations: []string{"Rule/a", "Rule/b"},
		},
		{
			name:       "a failing validator is a failure with its error and a warning; the others still run",
			validators: []Validator{rule("c", failing(noSchema)), rule("a", denying), rule("b", failing(badExpression))},
			violations: []string{"Rule/a"},
			warnings:   []string{"Rule/b: validation skipped: bad expression", "Rule/c: validation skipped: no schema"},
			failures: []Failure{
				{ID: ID{Dialect: "test", Kind: "Rule", Name: "b"}, Err: badExpression},
				{ID: ID{Dialect: "test", Kind: "Rule", Name: "c"}, Err: noSchema},
			},
		},
		{
			name:       "a validator whose targets do not name the request neither runs nor fails",
			validators: []Validator{rule("d", failing(noSchema), onDeployments)},
		},
	}
	req := &Request{Kind: podGVK, Operation: Create}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			violations, warnings, failures := NewValidators(tt.validators).Validate(context.Background(), req, newPod())
			var ids []string
			for _, v := range violations {
				ids = append(ids, v.ID.String())
			}
			if !slices.Equal(ids, tt.violations) {
				t.Errorf("violations of %q, want %q", ids, tt.violations)
			}
			if !slices.Equal(warnings, tt.warnings) {
				t.Errorf("warnings = %q, want %q", warnings, tt.warnings)
			}
			if !slices.EqualFunc(failures, tt.failures, func(a, b Failure) bool { return a.ID == b.ID && errors.Is(a.Err, b.Err) }) {
				t.Errorf("failures = %v, want %v", failures, tt.failures)
			}
		})
	}
}
