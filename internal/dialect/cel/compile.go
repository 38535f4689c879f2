package cel

import (
	"errors"
	"fmt"
	"strings"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/mutating"
	"k8s.io/apiserver/pkg/admission/plugin/policy/mutating/patch"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	apiservercel "k8s.io/apiserver/pkg/cel"
	"k8s.io/apiserver/pkg/cel/environment"

	"github.com/morph-dev/morph/internal/policy"
)

// programSpec is what a policy gives to be compiled: the fields MutatingAdmissionPolicy
// and Kyverno's MutatingPolicy share.
type programSpec struct {
	hasParams       bool
	variables       []admissionv1.Variable
	matchConditions []admissionv1.MatchCondition
	mutations       []admissionv1.Mutation
	failurePolicy   *admissionv1.FailurePolicyType
	name            string
	// auditAnnotations (Kyverno) are compiled to report their errors only.
	auditAnnotations []admissionv1.AuditAnnotation
	// targetExpression and targetMatchConditions (Kyverno mutateExisting) select the
	// existing objects a trigger mutates and check each (background.go).
	targetExpression      string
	targetMatchConditions []admissionv1.MatchCondition
}

// program is a policy compiled exactly as the API server compiles a
// MutatingAdmissionPolicy (mutating.compilePolicy): one composited compiler holding the
// variables, a match-conditions matcher and one patcher per mutation, in order.
type program struct {
	compiler *plugincel.CompositedCompiler
	matcher  matchconditions.Matcher
	patchers []patch.Patcher
	// applyConfig tells, per mutation, whether it is an ApplyConfiguration (which needs
	// the kind's schema).
	applyConfig []bool
}

// compileProgram compiles every expression of spec in env (the API server's base
// environment, extended with Kyverno's libraries for Kyverno policies), in stored
// expressions mode with the API server's cost limits. Errors name the expression's field
// with its line and column.
func compileProgram(doc policy.Document, env *environment.EnvSet, spec programSpec) (*program, []error) {
	compiler, err := plugincel.NewCompositedCompiler(env)
	if err != nil {
		return nil, []error{doc.Invalid("", nil, fmt.Sprintf("cannot build the CEL environment: %v", err))}
	}
	opts := plugincel.OptionalVariableDeclarations{HasParams: spec.hasParams, HasAuthorizer: true}
	var errs []error
	seen := map[string]bool{}
	for i, v := range spec.variables {
		field := fmt.Sprintf("spec.variables[%d]", i)
		if err := checkVariable(doc, field, v.Name, v.Expression, seen); err != nil {
			errs = append(errs, err)
			continue
		}
		res := compiler.CompileAndStoreVariable(&mutating.Variable{Name: v.Name, Expression: v.Expression}, opts, environment.StoredExpressions)
		if res.Error != nil {
			errs = append(errs, celError(doc, field+".expression", res.Error))
		}
	}

	p := &program{compiler: compiler}
	if len(spec.matchConditions) > 0 {
		accessors := make([]plugincel.ExpressionAccessor, len(spec.matchConditions))
		names := map[string]bool{}
		for i := range spec.matchConditions {
			mc := &spec.matchConditions[i]
			field := fmt.Sprintf("spec.matchConditions[%d]", i)
			if err := checkMatchConditionName(doc, field, mc.Name, names); err != nil {
				errs = append(errs, err)
			}
			accessors[i] = (*matchconditions.MatchCondition)(mc)
			if res := compiler.CompileCELExpression(accessors[i], opts, environment.StoredExpressions); res.Error != nil {
				errs = append(errs, celError(doc, field+".expression", res.Error))
			}
		}
		p.matcher = matchconditions.NewMatcher(compiler.CompileCondition(accessors, opts, environment.StoredExpressions), spec.failurePolicy, "policy", "mutate", spec.name)
	}

	patchOpts := opts
	patchOpts.HasPatchTypes = true
	if len(spec.mutations) == 0 {
		errs = append(errs, doc.Required("spec.mutations", "give at least one mutation"))
	}
	for i, m := range spec.mutations {
		expr, field, bad := checkMutation(doc, i, m)
		errs = append(errs, bad...)
		if expr == "" {
			continue
		}
		var accessor plugincel.ExpressionAccessor = &patch.ApplyConfigurationCondition{Expression: expr}
		if m.PatchType == admissionv1.PatchTypeJSONPatch {
			accessor = &patch.JSONPatchCondition{Expression: expr}
		}
		if res := compiler.CompileCELExpression(accessor, patchOpts, environment.StoredExpressions); res.Error != nil {
			errs = append(errs, celError(doc, field, res.Error))
			continue
		}
		ev := compiler.CompileMutatingEvaluator(accessor, patchOpts, environment.StoredExpressions)
		if m.PatchType == admissionv1.PatchTypeJSONPatch {
			p.patchers = append(p.patchers, patch.NewJSONPatcher(ev))
		} else {
			p.patchers = append(p.patchers, patch.NewApplyConfigurationPatcher(ev))
		}
		p.applyConfig = append(p.applyConfig, m.PatchType == admissionv1.PatchTypeApplyConfiguration)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return p, nil
}

// celError turns a compilation error into a located error: the field, then each issue
// with its line and column in the expression.
func celError(doc policy.Document, field string, err *apiservercel.Error) error {
	var ce *apiservercel.CompilationError
	if errors.As(err.Cause, &ce) && ce.Issues != nil {
		var parts []string
		for _, e := range ce.Issues.Errors() {
			loc := e.Location
			parts = append(parts, fmt.Sprintf("line %d, column %d: %s", loc.Line(), loc.Column()+1, e.Message))
		}
		if len(parts) > 0 {
			return doc.Invalid(field, nil, strings.Join(parts, "; "))
		}
	}
	return doc.Invalid(field, nil, err.Detail)
}

// checkMutation checks mutation i's patchType and expression, as the API server does:
// it returns the expression and its field, or "" when the mutation cannot be compiled,
// and the errors found (a stray field of the other patch type does not stop it).
func checkMutation(doc policy.Document, i int, m admissionv1.Mutation) (expr, at string, errs []error) {
	field := fmt.Sprintf("spec.mutations[%d]", i)
	switch m.PatchType {
	case admissionv1.PatchTypeApplyConfiguration:
		if m.ApplyConfiguration == nil || strings.TrimSpace(m.ApplyConfiguration.Expression) == "" {
			return "", "", []error{doc.Required(field+".applyConfiguration.expression", "patchType ApplyConfiguration needs an expression; give one")}
		}
		if m.JSONPatch != nil {
			errs = append(errs, doc.Forbidden(field+".jsonPatch", "must not be given when patchType is ApplyConfiguration; remove it"))
		}
		return m.ApplyConfiguration.Expression, field + ".applyConfiguration.expression", errs
	case admissionv1.PatchTypeJSONPatch:
		if m.JSONPatch == nil || strings.TrimSpace(m.JSONPatch.Expression) == "" {
			return "", "", []error{doc.Required(field+".jsonPatch.expression", "patchType JSONPatch needs an expression; give one")}
		}
		if m.ApplyConfiguration != nil {
			errs = append(errs, doc.Forbidden(field+".applyConfiguration", "must not be given when patchType is JSONPatch; remove it"))
		}
		return m.JSONPatch.Expression, field + ".jsonPatch.expression", errs
	case "":
		return "", "", []error{doc.Required(field+".patchType", "use ApplyConfiguration or JSONPatch")}
	}
	return "", "", []error{doc.NotSupported(field+".patchType", string(m.PatchType), "ApplyConfiguration", "JSONPatch")}
}

// checkMatchConditionName checks a match condition's name and records it in seen: every
// match condition needs a name, used once.
func checkMatchConditionName(doc policy.Document, field, name string, seen map[string]bool) error {
	defer func() { seen[name] = true }()
	switch {
	case name == "":
		return doc.Required(field+".name", "give the match condition a name")
	case seen[name]:
		return doc.Invalid(field+".name", name, "the match condition is defined twice; give each a name of its own")
	}
	return nil
}

// checkVariable checks a variable's name and expression before it is compiled, and
// records its name in seen: every variable needs a name, used once, and an expression.
func checkVariable(doc policy.Document, field, name, expression string, seen map[string]bool) error {
	switch {
	case name == "":
		return doc.Required(field+".name", "give the variable a name")
	case seen[name]:
		return doc.Invalid(field+".name", name, "the variable is defined twice; give each a name of its own")
	case strings.TrimSpace(expression) == "":
		return doc.Required(field+".expression", "give the variable's CEL expression")
	}
	seen[name] = true
	return nil
}
