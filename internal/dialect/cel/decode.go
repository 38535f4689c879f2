package cel

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/morph-dev/morph/internal/policy"
)

// The API groups and kinds this dialect reads.
const (
	groupAdmission = "admissionregistration.k8s.io"
	groupKyverno   = "policies.kyverno.io"

	kindMAP                = "MutatingAdmissionPolicy"
	kindMAPBinding         = "MutatingAdmissionPolicyBinding"
	kindMutatingPolicy     = "MutatingPolicy"
	kindNamespacedMutating = "NamespacedMutatingPolicy"
	kindPolicyException    = "PolicyException"
)

var admissionVersions = map[string]bool{"v1": true, "v1beta1": true, "v1alpha1": true}

var kyvernoVersions = map[string]bool{"v1": true, "v1beta1": true, "v1alpha1": true}

// kyvernoPolicyDocument is a whole Kyverno MutatingPolicy or NamespacedMutatingPolicy,
// decoded strictly: a field Kyverno does not define is an error naming it.
type kyvernoPolicyDocument struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   metav1.ObjectMeta `json:"metadata"`
	Spec       kyvernoPolicySpec `json:"spec"`
	Status     any               `json:"status,omitempty"`
}

// kyvernoPolicySpec is the spec of a Kyverno MutatingPolicy or NamespacedMutatingPolicy
// (every field of Kyverno 1.19's MutatingPolicySpec): the MutatingAdmissionPolicy fields
// plus Kyverno's own.
type kyvernoPolicySpec struct {
	MatchConstraints       *admissionv1.MatchResources        `json:"matchConstraints,omitempty"`
	FailurePolicy          *admissionv1.FailurePolicyType     `json:"failurePolicy,omitempty"`
	MatchConditions        []admissionv1.MatchCondition       `json:"matchConditions,omitempty"`
	Variables              []admissionv1.Variable             `json:"variables,omitempty"`
	Mutations              []admissionv1.Mutation             `json:"mutations,omitempty"`
	ReinvocationPolicy     admissionv1.ReinvocationPolicyType `json:"reinvocationPolicy,omitempty"`
	Evaluation             *kyvernoEvaluation                 `json:"evaluation,omitempty"`
	WebhookConfiguration   *kyvernoWebhookConfiguration       `json:"webhookConfiguration,omitempty"`
	Autogen                *kyvernoAutogen                    `json:"autogen,omitempty"`
	TargetMatchConstraints *kyvernoTargetMatchConstraints     `json:"targetMatchConstraints,omitempty"`
	TargetMatchConditions  []admissionv1.MatchCondition       `json:"targetMatchConditions,omitempty"`
	// AuditAnnotations annotate Kyverno's audit events; morph has none and compiles
	// them only to report errors.
	AuditAnnotations []admissionv1.AuditAnnotation `json:"auditAnnotations,omitempty"`
}

// kyvernoTargetMatchConstraints are match constraints with Kyverno's expression.
type kyvernoTargetMatchConstraints struct {
	Expression string `json:"expression,omitempty"`
	admissionv1.MatchResources
}

type kyvernoEvaluation struct {
	Admission *struct {
		Enabled *bool `json:"enabled,omitempty"`
	} `json:"admission,omitempty"`
	// Background controls Kyverno's background scans (reports); it does not change
	// what a mutation does.
	Background *struct {
		Enabled *bool `json:"enabled,omitempty"`
	} `json:"background,omitempty"`
	MutateExisting *struct {
		Enabled bool `json:"enabled,omitempty"`
		// TargetMatchConstraints is accepted here too, for policies that nest it.
		TargetMatchConstraints *admissionv1.MatchResources `json:"targetMatchConstraints,omitempty"`
	} `json:"mutateExisting,omitempty"`
	Mode                   string `json:"mode,omitempty"`
	SkipBackgroundRequests *bool  `json:"skipBackgroundRequests,omitempty"`
	UseServerSideApply     bool   `json:"useServerSideApply,omitempty"`
}

type kyvernoWebhookConfiguration struct {
	TimeoutSeconds *int32 `json:"timeoutSeconds,omitempty"`
}

type kyvernoAutogen struct {
	PodControllers *struct {
		Controllers []string `json:"controllers,omitempty"`
	} `json:"podControllers,omitempty"`
	MutatingAdmissionPolicy *struct {
		Enabled bool `json:"enabled,omitempty"`
	} `json:"mutatingAdmissionPolicy,omitempty"`
}

// exceptionSpec is a Kyverno CEL PolicyException (policies.kyverno.io).
type exceptionSpec struct {
	PolicyRefs []struct {
		Name string `json:"name"`
		Kind string `json:"kind,omitempty"`
	} `json:"policyRefs"`
	MatchConditions []admissionv1.MatchCondition `json:"matchConditions,omitempty"`
	Images          []string                     `json:"images,omitempty"`
	AllowedValues   []string                     `json:"allowedValues,omitempty"`
	// ExpiresAt ends the exception: after it, it no longer applies.
	ExpiresAt *metav1.Time `json:"expiresAt,omitempty"`
	// ReportResult, Properties and EvaluationMode are for Kyverno's reports and
	// controllers; they do not change a mutation.
	ReportResult   string            `json:"reportResult,omitempty"`
	Properties     map[string]string `json:"properties,omitempty"`
	EvaluationMode string            `json:"evaluationMode,omitempty"`
}

// exceptionDocument is a whole PolicyException, decoded strictly.
type exceptionDocument struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   metav1.ObjectMeta `json:"metadata"`
	Spec       exceptionSpec     `json:"spec"`
}

// decodeInto decodes the document (as JSON) into v. When strict, unknown fields are an
// error that names them, so that a misspelt field does not silently do nothing; Kyverno
// documents are read leniently, since Kyverno adds fields morph has no use for.
func decodeInto(doc policy.Document, v any, strict bool) error {
	raw, err := json.Marshal(doc.Object)
	if err != nil {
		return doc.Invalid("", nil, fmt.Sprintf("cannot encode the document: %v", err))
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if strict {
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(v); err != nil {
		at, msg := fieldOfJSONError(err), strings.TrimPrefix(err.Error(), "json: ")
		if strings.HasPrefix(msg, "unknown field ") {
			return doc.Forbidden(at, "unknown field; remove it or correct its spelling")
		}
		return doc.Invalid(at, nil, msg)
	}
	return nil
}

// fieldOfJSONError extracts the field path from encoding/json's errors.
func fieldOfJSONError(err error) string {
	var te *json.UnmarshalTypeError
	if ok := asTypeError(err, &te); ok {
		return te.Field
	}
	msg := err.Error()
	if i := strings.Index(msg, "unknown field "); i >= 0 {
		f, uerr := strconv.Unquote(strings.TrimSpace(msg[i+len("unknown field "):]))
		if uerr == nil {
			return f
		}
	}
	return ""
}

func asTypeError(err error, te **json.UnmarshalTypeError) bool {
	return errors.As(err, te)
}

// checkVersion rejects an apiVersion this dialect does not read.
func checkVersion(doc policy.Document, versions map[string]bool) error {
	v := doc.APIVersion()
	if i := strings.IndexByte(v, '/'); i >= 0 {
		v = v[i+1:]
	}
	if !versions[v] {
		return doc.Invalid("apiVersion", doc.APIVersion(), fmt.Sprintf("version %s is not supported; use v1, v1beta1 or v1alpha1", v))
	}
	return nil
}

// defaultMatchResources applies the API server's defaults (SetDefaults_MatchResources and
// SetDefaults_Rule): matchPolicy Equivalent, empty selectors, scope "*".
func defaultMatchResources(m *admissionv1.MatchResources) {
	if m == nil {
		return
	}
	if m.MatchPolicy == nil {
		p := admissionv1.Equivalent
		m.MatchPolicy = &p
	}
	if m.NamespaceSelector == nil {
		m.NamespaceSelector = &metav1.LabelSelector{}
	}
	if m.ObjectSelector == nil {
		m.ObjectSelector = &metav1.LabelSelector{}
	}
	for _, rules := range [][]admissionv1.NamedRuleWithOperations{m.ResourceRules, m.ExcludeResourceRules} {
		for i := range rules {
			if rules[i].Scope == nil {
				s := admissionv1.AllScopes
				rules[i].Scope = &s
			}
		}
	}
}

// validateMatchResources checks what the API server's validation checks of
// matchConstraints/matchResources; field is the path of m.
func validateMatchResources(doc policy.Document, field string, m *admissionv1.MatchResources, mutating bool) []error {
	if m == nil {
		return nil
	}
	var errs []error
	if m.MatchPolicy != nil && *m.MatchPolicy != admissionv1.Exact && *m.MatchPolicy != admissionv1.Equivalent {
		errs = append(errs, doc.NotSupported(field+".matchPolicy", string(*m.MatchPolicy), "Exact", "Equivalent"))
	}
	for _, sel := range []struct {
		name string
		s    *metav1.LabelSelector
	}{{"namespaceSelector", m.NamespaceSelector}, {"objectSelector", m.ObjectSelector}} {
		if sel.s == nil {
			continue
		}
		if _, err := metav1.LabelSelectorAsSelector(sel.s); err != nil {
			errs = append(errs, doc.Invalid(field+"."+sel.name, nil, err.Error()))
		}
	}
	for _, list := range []struct {
		name  string
		rules []admissionv1.NamedRuleWithOperations
	}{{"resourceRules", m.ResourceRules}, {"excludeResourceRules", m.ExcludeResourceRules}} {
		for i, r := range list.rules {
			f := fmt.Sprintf("%s.%s[%d]", field, list.name, i)
			errs = append(errs, validateRule(doc, f, r, mutating && list.name == "resourceRules")...)
		}
	}
	return errs
}

func validateRule(doc policy.Document, field string, r admissionv1.NamedRuleWithOperations, mutating bool) []error {
	var errs []error
	if len(r.APIGroups) == 0 {
		errs = append(errs, doc.Required(field+".apiGroups", `list the API groups ("" is the core group, "*" all)`))
	}
	if len(r.APIVersions) == 0 {
		errs = append(errs, doc.Required(field+".apiVersions", `list the API versions ("*" for all)`))
	}
	if len(r.Resources) == 0 {
		errs = append(errs, doc.Required(field+".resources", "list the resources, e.g. pods or pods/status"))
	}
	for _, res := range r.Resources {
		if res == "" || strings.Count(res, "/") > 1 {
			errs = append(errs, doc.Invalid(field+".resources", res, "not a resource; use resource or resource/subresource"))
		}
	}
	if len(r.Operations) == 0 {
		errs = append(errs, doc.Required(field+".operations", "list CREATE, UPDATE, CONNECT or *"))
	}
	for _, op := range r.Operations {
		switch op {
		case admissionv1.OperationAll, admissionv1.Create, admissionv1.Update, admissionv1.Connect:
		case admissionv1.Delete:
			if mutating {
				errs = append(errs, doc.Invalid(field+".operations", "DELETE", "DELETE cannot be mutated; use CREATE, UPDATE, CONNECT or *"))
			}
		default:
			errs = append(errs, doc.NotSupported(field+".operations", string(op), "CREATE", "UPDATE", "CONNECT", "*"))
		}
	}
	if r.Scope != nil {
		switch *r.Scope {
		case admissionv1.AllScopes, admissionv1.ClusterScope, admissionv1.NamespacedScope:
		default:
			errs = append(errs, doc.NotSupported(field+".scope", string(*r.Scope), "Cluster", "Namespaced", "*"))
		}
	}
	return errs
}

// validateName checks a metadata.name as the API server does (a DNS subdomain).
func validateName(doc policy.Document) error {
	name := doc.Name()
	if name == "" {
		return doc.Required("metadata.name", "name the policy")
	}
	if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
		return doc.Invalid("metadata.name", name, strings.Join(msgs, "; "))
	}
	return nil
}

// validateParamRef checks a binding's paramRef as the API server does.
func validateParamRef(doc policy.Document, field string, p *admissionv1.ParamRef) []error {
	if p == nil {
		return nil
	}
	var errs []error
	if p.Name != "" && p.Selector != nil {
		errs = append(errs, doc.Forbidden(field, "name and selector are mutually exclusive; give one"))
	}
	if p.Name == "" && p.Selector == nil {
		errs = append(errs, doc.Required(field, "give one of name or selector"))
	}
	if p.Selector != nil {
		if _, err := metav1.LabelSelectorAsSelector(p.Selector); err != nil {
			errs = append(errs, doc.Invalid(field+".selector", nil, err.Error()))
		}
	}
	if p.ParameterNotFoundAction == nil {
		errs = append(errs, doc.Required(field+".parameterNotFoundAction", "use Allow or Deny"))
	} else if a := *p.ParameterNotFoundAction; a != admissionv1.AllowAction && a != admissionv1.DenyAction {
		errs = append(errs, doc.NotSupported(field+".parameterNotFoundAction", string(a), "Allow", "Deny"))
	}
	return errs
}

// unimplementedKyvernoFields names the Kyverno fields that change what a policy does and
// that morph does not implement: a policy using them is refused rather than run
// differently.
func unimplementedKyvernoFields(doc policy.Document, spec *kyvernoPolicySpec) []error {
	var errs []error
	if ev := spec.Evaluation; ev != nil {
		if ev.Mode != "" && ev.Mode != "Kubernetes" {
			errs = append(errs, doc.Invalid("spec.evaluation.mode", ev.Mode, "morph evaluates Kubernetes objects only; use mode Kubernetes"))
		}
		if ev.UseServerSideApply {
			errs = append(errs, doc.Forbidden("spec.evaluation.useServerSideApply", "morph does not implement useServerSideApply yet; remove it to merge apply configurations as the API server's MutatingAdmissionPolicy does"))
		}
	}
	return errs
}
