package cel

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	celgo "github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apiserver/pkg/admission"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/mutating/patch"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/cel/lazy"

	admissionapi "k8s.io/api/admission/v1"

	"github.com/morph-dev/morph/internal/policy"
)

// kyvernoProgram is a Kyverno MutatingPolicy compiled as Kyverno 1.19 compiles it
// (pkg/cel/policies/mpol/compiler): every expression in newKyvernoEnv, evaluated on an
// activation of object, oldObject, request, namespaceObject, variables and exceptions.
// The mutations' results are applied by the API server's own patchers, as Kyverno does.
type kyvernoProgram struct {
	variables       []kyvernoVariable
	matchConditions []kyvernoCondition
	mutations       []kyvernoMutation
	// nondeterministic names the non-deterministic functions the policy calls
	// (random, time.now), for --explain.
	nondeterministic []string
	// rewritten lists the expressions autogen rewrote (for --explain), for a program
	// compiled for pod controllers.
	rewritten []string
	// targetExpression selects the targets of a trigger (targetMatchConstraints.expression),
	// or is nil; targetMatchConditions are checked on each target instead of
	// matchConditions (background.go).
	targetExpression      celgo.Program
	targetMatchConditions []kyvernoCondition
}

type kyvernoVariable struct {
	name string
	prog celgo.Program
}

type kyvernoCondition struct {
	name string
	prog celgo.Program
}

type kyvernoMutation struct {
	applyConfig bool
	prog        celgo.Program
	// expression is the expression as evaluated (autogen rewrites it).
	expression string
}

// programOptions bound every Kyverno expression as the API server bounds one CEL
// expression (Kyverno sets no bound; morph keeps the API server's), and let a
// cancelled context interrupt a long evaluation.
var programOptions = []celgo.ProgramOption{
	celgo.CostLimit(celconfig.PerCallLimit),
	celgo.InterruptCheckFrequency(celconfig.CheckFrequency),
}

// nondeterministicFunctions are the library functions whose result changes from one
// call to the next.
var nondeterministicFunctions = []string{"random", "random.random", "time.now"}

// compileKyvernoProgram compiles a Kyverno policy's variables, match conditions and
// mutations (and returns the compiled programs of the exceptions' match conditions
// through compileKyvernoConditions).
func compileKyvernoProgram(doc policy.Document, hosts kyvernoHosts, namespace string, spec programSpec) (*kyvernoProgram, []error) {
	env, vars, err := newKyvernoEnv(hosts, namespace)
	if err != nil {
		return nil, []error{doc.Invalid("", nil, fmt.Sprintf("cannot build Kyverno's CEL environment: %v", err))}
	}
	p := &kyvernoProgram{}
	var errs []error
	seenCalls := map[string]bool{}
	compile := func(field, expr string, want *celgo.Type) celgo.Program {
		ast, iss := env.Compile(expr)
		if iss.Err() != nil {
			errs = append(errs, issuesError(doc, field, iss))
			return nil
		}
		if want != nil && !ast.OutputType().IsExactType(want) {
			errs = append(errs, doc.Invalid(field, nil, fmt.Sprintf("output is expected to be of type %s, not %s", want, ast.OutputType())))
			return nil
		}
		for _, name := range calledFunctions(ast) {
			seenCalls[name] = true
		}
		prog, err := env.Program(ast, programOptions...)
		if err != nil {
			errs = append(errs, doc.Invalid(field, nil, err.Error()))
			return nil
		}
		return prog
	}
	seen := map[string]bool{}
	for i, v := range spec.variables {
		field := fmt.Sprintf("spec.variables[%d]", i)
		if err := checkVariable(doc, field, v.Name, v.Expression, seen); err != nil {
			errs = append(errs, err)
			continue
		}
		ast, iss := env.Compile(v.Expression)
		if iss.Err() != nil {
			errs = append(errs, issuesError(doc, field+".expression", iss))
			continue
		}
		vars.register(v.Name, ast.OutputType())
		for _, name := range calledFunctions(ast) {
			seenCalls[name] = true
		}
		prog, err := env.Program(ast, programOptions...)
		if err != nil {
			errs = append(errs, doc.Invalid(field+".expression", nil, err.Error()))
			continue
		}
		p.variables = append(p.variables, kyvernoVariable{name: v.Name, prog: prog})
	}
	names := map[string]bool{}
	for i, mc := range spec.matchConditions {
		field := fmt.Sprintf("spec.matchConditions[%d]", i)
		if err := checkMatchConditionName(doc, field, mc.Name, names); err != nil {
			errs = append(errs, err)
		}
		if prog := compile(field+".expression", mc.Expression, celgo.BoolType); prog != nil {
			p.matchConditions = append(p.matchConditions, kyvernoCondition{name: mc.Name, prog: prog})
		}
	}
	names = map[string]bool{}
	for i, mc := range spec.targetMatchConditions {
		field := fmt.Sprintf("spec.targetMatchConditions[%d]", i)
		if err := checkMatchConditionName(doc, field, mc.Name, names); err != nil {
			errs = append(errs, err)
		}
		if prog := compile(field+".expression", mc.Expression, celgo.BoolType); prog != nil {
			p.targetMatchConditions = append(p.targetMatchConditions, kyvernoCondition{name: mc.Name, prog: prog})
		}
	}
	if spec.targetExpression != "" {
		// Kyverno 1.19 (pkg/cel/policies/mpol/compiler/compiler.go) wants exactly
		// map(string, google.protobuf.Any), what resource.get and resource.list return:
		// one object, or a list as {items: [...]}.
		p.targetExpression = compile("spec.targetMatchConstraints.expression", spec.targetExpression, celgo.MapType(celgo.StringType, celgo.AnyType))
	}
	if len(spec.mutations) == 0 {
		errs = append(errs, doc.Required("spec.mutations", "give at least one mutation"))
	}
	for i, m := range spec.mutations {
		expr, field, bad := checkMutation(doc, i, m)
		errs = append(errs, bad...)
		if expr == "" {
			continue
		}
		applyConfig := m.PatchType == admissionv1.PatchTypeApplyConfiguration
		want := celgo.ListType(jsonPatchType)
		if applyConfig {
			want = applyConfigType
		}
		if prog := compile(field, expr, want); prog != nil {
			p.mutations = append(p.mutations, kyvernoMutation{applyConfig: applyConfig, prog: prog, expression: expr})
		}
	}
	for i, a := range spec.auditAnnotations {
		// morph has no audit events: the expressions are checked, not evaluated.
		field := fmt.Sprintf("spec.auditAnnotations[%d].valueExpression", i)
		ast, iss := env.Compile(a.ValueExpression)
		if iss.Err() != nil {
			errs = append(errs, issuesError(doc, field, iss))
		} else if t := ast.OutputType(); !t.IsExactType(celgo.StringType) && !t.IsExactType(celgo.NullType) {
			errs = append(errs, doc.Invalid(field, nil, fmt.Sprintf("output is expected to be of type string or null, not %s", t)))
		}
	}
	for _, name := range nondeterministicFunctions {
		if seenCalls[name] {
			p.nondeterministic = append(p.nondeterministic, name)
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return p, nil
}

// compileKyvernoConditions compiles a PolicyException's match conditions in the
// environment of the policy it names.
func compileKyvernoConditions(doc policy.Document, hosts kyvernoHosts, namespace, field string, conds []admissionv1.MatchCondition) ([]kyvernoCondition, []error) {
	if len(conds) == 0 {
		return nil, nil
	}
	env, _, err := newKyvernoEnv(hosts, namespace)
	if err != nil {
		return nil, []error{doc.Invalid("", nil, fmt.Sprintf("cannot build Kyverno's CEL environment: %v", err))}
	}
	var out []kyvernoCondition
	var errs []error
	for i, mc := range conds {
		f := fmt.Sprintf("%s[%d].expression", field, i)
		ast, iss := env.Compile(mc.Expression)
		if iss.Err() != nil {
			errs = append(errs, issuesError(doc, f, iss))
			continue
		}
		if !ast.OutputType().IsExactType(celgo.BoolType) {
			errs = append(errs, doc.Invalid(f, nil, fmt.Sprintf("output is expected to be of type bool, not %s", ast.OutputType())))
			continue
		}
		prog, err := env.Program(ast, programOptions...)
		if err != nil {
			errs = append(errs, doc.Invalid(f, nil, err.Error()))
			continue
		}
		out = append(out, kyvernoCondition{name: mc.Name, prog: prog})
	}
	return out, errs
}

// issuesError turns CEL compilation issues into a located error: the field, then each
// issue with its line and column in the expression.
func issuesError(doc policy.Document, field string, iss *celgo.Issues) error {
	var parts []string
	for _, e := range iss.Errors() {
		loc := e.Location
		parts = append(parts, fmt.Sprintf("line %d, column %d: %s", loc.Line(), loc.Column()+1, e.Message))
	}
	if len(parts) == 0 {
		return doc.Invalid(field, nil, iss.Err().Error())
	}
	return doc.Invalid(field, nil, strings.Join(parts, "; "))
}

// calledFunctions lists the functions an expression calls (member calls by their name,
// global calls by their qualified name).
func calledFunctions(ast *celgo.Ast) []string {
	var out []string
	for _, ref := range ast.NativeRep().ReferenceMap() {
		for _, id := range ref.OverloadIDs {
			switch {
			case strings.HasPrefix(id, "random"):
				out = append(out, "random")
			case strings.HasPrefix(id, "time_now"), strings.HasPrefix(id, "time.now"):
				out = append(out, "time.now")
			}
		}
	}
	return out
}

// newKyvernoData builds the activation of a request, as Kyverno's prepareData does:
// object and oldObject, the admission request with object and oldObject, the Namespace.
func newKyvernoData(req *admissionapi.AdmissionRequest, obj, old map[string]any, ns *corev1.Namespace) (map[string]any, error) {
	reqMap, err := toUnstructured(req)
	if err != nil {
		return nil, fmt.Errorf("request: %w", err)
	}
	var objVal, oldVal any
	if obj != nil {
		objVal = obj
	}
	if old != nil {
		oldVal = old
	}
	reqMap[varObject] = objVal
	reqMap[varOldObject] = oldVal
	var nsVal any
	if ns != nil {
		m, err := toUnstructured(ns)
		if err != nil {
			return nil, fmt.Errorf("namespaceObject: %w", err)
		}
		nsVal = m
	}
	return map[string]any{
		varObject:          objVal,
		varOldObject:       oldVal,
		varRequest:         reqMap,
		varNamespaceObject: nsVal,
	}, nil
}

// bindVariables adds the lazily evaluated `variables` to data.
func (p *kyvernoProgram) bindVariables(ctx context.Context, data map[string]any) {
	vars := lazy.NewMapValue(kyvernoVariablesType)
	data[varVariables] = vars
	for _, v := range p.variables {
		prog := v.prog
		vars.Append(v.name, func(*lazy.MapValue) ref.Val {
			out, _, err := prog.ContextEval(ctx, data)
			if out != nil {
				return out
			}
			if err != nil {
				return types.WrapErr(err)
			}
			return types.NullValue
		})
	}
}

// matchAll evaluates conditions as Kyverno does: false at the first false; errors of the
// others joined when none is false.
func matchAll(ctx context.Context, conds []kyvernoCondition, data map[string]any) (bool, error) {
	var errs []error
	for _, c := range conds {
		out, _, err := c.prog.ContextEval(ctx, data)
		if err != nil {
			errs = append(errs, fmt.Errorf("matchConditions %q: %w", c.name, err))
			continue
		}
		b, ok := out.Value().(bool)
		if !ok {
			errs = append(errs, fmt.Errorf("matchConditions %q: not a bool", c.name))
			continue
		}
		if !b {
			return false, nil
		}
	}
	if len(errs) > 0 {
		return false, errors.Join(errs...)
	}
	return true, nil
}

// boundEvaluator is one mutation's program bound to one evaluation's data: the API
// server's patchers call it to get the mutation's value.
type boundEvaluator struct {
	prog celgo.Program
	data map[string]any
}

func (e boundEvaluator) ForInput(ctx context.Context, _ *admission.VersionedAttributes, _ *admissionapi.AdmissionRequest, _ plugincel.OptionalVariableBindings, _ *corev1.Namespace, budget int64) (plugincel.EvaluationResult, int64, error) {
	start := time.Now()
	out, _, err := e.prog.ContextEval(ctx, e.data)
	res := plugincel.EvaluationResult{EvalResult: out, Elapsed: time.Since(start)}
	if err != nil {
		res.Error = err
	}
	return res, budget, nil
}

func (boundEvaluator) CompilationErrors() []error { return nil }

// patcherFor returns the API server's patcher for a mutation bound to data.
func (m kyvernoMutation) patcherFor(data map[string]any) patch.Patcher {
	ev := boundEvaluator{prog: m.prog, data: data}
	if m.applyConfig {
		return patch.NewApplyConfigurationPatcher(ev)
	}
	return patch.NewJSONPatcher(ev)
}
