package cel

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/cel/environment"

	"github.com/morph-dev/morph/internal/engine"
	"github.com/morph-dev/morph/internal/objects"
	"github.com/morph-dev/morph/internal/policy"
)

// Options configures the CEL dialect.
type Options struct {
	// Objects holds the context objects: params, CRDs (schemas for ApplyConfiguration),
	// Namespaces (namespaceSelector, namespaceObject), the objects resource.Get/List read
	// and GlobalContextEntries. May be nil.
	Objects *objects.Store
	// Types finds kind schemas for ApplyConfiguration mutations; nil reads them offline
	// (client-go's built-in schemas, then CRDs in Objects).
	Types TypeConverterSource
	// APITypes, when Types is nil, answers the kinds the offline schemas do not know (in
	// a cluster: TypeConverterManagerSource on the API server's OpenAPI, for kinds such
	// as subresource kinds outside client-go's and morph's built-in schemas).
	APITypes TypeConverterSource
	// Resources answers resource.Get/List; nil answers from Objects.
	Resources ResourceReader
	// GlobalContext supplies the GlobalContextEntries globalContext.Get reads; nil
	// answers from Objects.
	GlobalContext GlobalContextSource
	// APICalls keeps GlobalContextEntry apiCall answers across dialects built one after
	// the other (nil: this dialect's own).
	APICalls *APICallCache
	// ImageData answers image.getMetadata; nil answers from the Kyverno CLI Context
	// objects (cli.kyverno.io/v1alpha1 Context, spec.images) in Objects, then from the
	// registries of RegistryAllowHosts.
	ImageData ImageDataReader
	// HTTPAllowHosts lists the hosts (host or host:port) http.Get/Post may call; empty
	// turns the http library off.
	HTTPAllowHosts []string
	// RegistryAllowHosts lists the registries (host or host:port, as in the image
	// reference) image.getMetadata may read when the context objects do not hold the
	// image's data; empty reads none.
	RegistryAllowHosts []string
	// HTTPTimeout bounds each http.Get/Post call and registry read (default 10s).
	HTTPTimeout time.Duration
	// KyvernoCLI follows the Kyverno CLI's conventions instead of the cluster's, for
	// suites written for `kyverno test` (see testconventions.go).
	KyvernoCLI bool
}

// OrderAnnotation sets a policy's place in the engine's order (an integer, default 0).
const OrderAnnotation = policy.OrderAnnotation

// dialect is the CEL dialect: Kubernetes MutatingAdmissionPolicies with their bindings and
// Kyverno MutatingPolicies, compiled by k8s.io/apiserver's own compiler.
type dialect struct {
	opts    Options
	types   TypeConverterSource
	baseEnv *environment.EnvSet
	// hosts answer the Kyverno libraries.
	hosts kyvernoHosts
}

// New returns the CEL dialect.
func New(opts Options) policy.Dialect {
	return newDialect(opts)
}

func newDialect(opts Options) *dialect {
	d := &dialect{opts: opts, types: opts.Types}
	if d.types == nil {
		d.types = newOfflineTypes(opts.Objects)
		if opts.APITypes != nil {
			d.types = chainTypes{d.types, opts.APITypes}
		}
	}
	d.baseEnv = environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion())
	store := storeReader{store: opts.Objects}
	var resources ResourceReader = store
	if opts.Resources != nil {
		resources = opts.Resources
	}
	var global GlobalContextSource = store
	if opts.GlobalContext != nil {
		global = opts.GlobalContext
	}
	var images ImageDataReader = imageDataReader{store: store, allow: opts.RegistryAllowHosts, timeout: opts.HTTPTimeout}
	if opts.ImageData != nil {
		images = opts.ImageData
	}
	caller := newHTTPCaller(opts.HTTPAllowHosts, opts.HTTPTimeout)
	d.hosts = kyvernoHosts{
		resources: resourceHost{r: resources, store: opts.Objects},
		global:    newGlobalResolver(global, caller, opts.APICalls),
		images:    imageHost{r: images},
		http:      caller,
	}
	return d
}

// Name implements policy.Dialect.
func (d *dialect) Name() string { return "cel" }

// Handles implements policy.Dialect.
func (d *dialect) Handles(apiVersion, kind string) bool {
	switch policy.Group(apiVersion) {
	case groupAdmission:
		return kind == kindMAP || kind == kindMAPBinding
	case groupKyverno:
		return kind == kindMutatingPolicy || kind == kindNamespacedMutating || kind == kindPolicyException
	}
	return false
}

// orderOf reads the morph.dev/order annotation.
func orderOf(doc policy.Document) (int, error) { return doc.Order() }

// Compile implements policy.Dialect.
func (d *dialect) Compile(docs []policy.Document) (*policy.Bundle, error) {
	b := &policy.Bundle{}
	var errs []error
	var exceptions []*exception
	type mapEntry struct {
		doc      policy.Document
		policy   *admissionv1.MutatingAdmissionPolicy
		prog     *program
		bindings int
	}
	maps := map[string]*mapEntry{}
	var mapOrder []string
	var bindings []policy.Document
	var kyverno []policy.Document

	for _, doc := range docs {
		switch doc.Kind() {
		case kindPolicyException:
			ex, es := d.compileException(doc)
			errs = append(errs, es...)
			if ex != nil {
				exceptions = append(exceptions, ex)
			}
		case kindMAP:
			p, prog, es := d.compileMAP(doc)
			errs = append(errs, es...)
			if p == nil {
				continue
			}
			if _, dup := maps[p.Name]; dup {
				errs = append(errs, doc.Invalid("metadata.name", p.Name, "a MutatingAdmissionPolicy of this name is already loaded; names must be unique"))
				continue
			}
			maps[p.Name] = &mapEntry{doc: doc, policy: p, prog: prog}
			mapOrder = append(mapOrder, p.Name)
		case kindMAPBinding:
			bindings = append(bindings, d.kyvernoCLIBinding(doc))
		default:
			kyverno = append(kyverno, doc)
		}
	}
	slices.SortFunc(exceptions, func(a, b *exception) int {
		return strings.Compare(a.namespace+"/"+a.name, b.namespace+"/"+b.name)
	})

	for _, doc := range bindings {
		bd, es := decodeBinding(doc)
		if len(es) > 0 {
			errs = append(errs, es...)
			continue
		}
		entry, ok := maps[bd.Spec.PolicyName]
		if !ok {
			b.Warnings = append(b.Warnings, fmt.Sprintf("%s: spec.policyName: no MutatingAdmissionPolicy %q is loaded, so the binding does nothing", doc.Where(), bd.Spec.PolicyName))
			continue
		}
		entry.bindings++
		order, err := orderOf(entry.doc)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if o, err := orderOf(doc); err != nil {
			errs = append(errs, err)
			continue
		} else if o != 0 {
			order = o
		}
		p := entry.policy
		m := &Mutator{
			id:          engine.ID{Order: order, Dialect: "cel", Kind: kindMAP, Name: p.Name, Part: bd.Name},
			d:           d,
			prog:        entry.prog,
			failure:     *p.Spec.FailurePolicy,
			constraints: p.Spec.MatchConstraints,
			binding:     bd.Spec.MatchResources,
			paramKind:   p.Spec.ParamKind,
			paramRef:    bd.Spec.ParamRef,
			reinvoke:    reinvocationOf(p.Spec.ReinvocationPolicy),
			// namespaceObject is read by the policy's or the binding's expressions.
			readsNamespace: mentionsNamespaceObject(entry.doc) || mentionsNamespaceObject(doc),
		}
		m.targets = resolver{store: d.opts.Objects}.targetsOf(p.Spec.MatchConstraints.ResourceRules, *p.Spec.MatchConstraints.MatchPolicy == admissionv1.Equivalent)
		b.Mutators = append(b.Mutators, m.compiled())
	}
	for _, name := range mapOrder {
		if e := maps[name]; e.bindings == 0 && d.opts.KyvernoCLI {
			m, err := d.unboundMAP(e.doc, e.policy, e.prog)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			b.Mutators = append(b.Mutators, m.compiled())
		} else if e.bindings == 0 {
			b.Warnings = append(b.Warnings, fmt.Sprintf("%s: no MutatingAdmissionPolicyBinding binds the policy, so it does nothing (as in Kubernetes): add a binding", e.doc.Where()))
		}
	}

	for _, doc := range kyverno {
		m, es := d.compileKyverno(doc)
		errs = append(errs, es...)
		b.Warnings = append(b.Warnings, autogenWarnings(doc)...)
		if m == nil {
			continue
		}
		for _, ex := range exceptions {
			if !ex.names(m.id) {
				continue
			}
			bound, es := d.bindException(ex, m.namespace)
			if len(es) > 0 {
				errs = append(errs, es...)
				continue
			}
			m.exceptions = append(m.exceptions, bound)
		}
		b.Mutators = append(b.Mutators, m.compiled())
	}
	return b, errors.Join(errs...)
}

func reinvocationOf(p admissionv1.ReinvocationPolicyType) engine.Reinvocation {
	if p == admissionv1.IfNeededReinvocationPolicy {
		return engine.ReinvokeOnce
	}
	return engine.ReinvokeNever
}

func validateReinvocation(doc policy.Document, p admissionv1.ReinvocationPolicyType) error {
	switch p {
	case "", admissionv1.NeverReinvocationPolicy, admissionv1.IfNeededReinvocationPolicy:
		return nil
	}
	return doc.NotSupported("spec.reinvocationPolicy", string(p), "Never", "IfNeeded")
}

func validateFailurePolicy(doc policy.Document, p **admissionv1.FailurePolicyType) error {
	if *p == nil {
		f := admissionv1.Fail
		*p = &f
		return nil
	}
	switch **p {
	case admissionv1.Fail, admissionv1.Ignore:
		return nil
	}
	return doc.NotSupported("spec.failurePolicy", string(**p), "Fail", "Ignore")
}

// compileMAP decodes, defaults, validates and compiles a MutatingAdmissionPolicy.
func (d *dialect) compileMAP(doc policy.Document) (*admissionv1.MutatingAdmissionPolicy, *program, []error) {
	if err := checkVersion(doc, admissionVersions); err != nil {
		return nil, nil, []error{err}
	}
	var p admissionv1.MutatingAdmissionPolicy
	if err := decodeInto(doc, &p, true); err != nil {
		return nil, nil, []error{err}
	}
	var errs []error
	if err := validateName(doc); err != nil {
		errs = append(errs, err)
	}
	if err := validateFailurePolicy(doc, &p.Spec.FailurePolicy); err != nil {
		errs = append(errs, err)
	}
	if err := validateReinvocation(doc, p.Spec.ReinvocationPolicy); err != nil {
		errs = append(errs, err)
	}
	if pk := p.Spec.ParamKind; pk != nil && (pk.APIVersion == "" || pk.Kind == "") {
		errs = append(errs, doc.Required("spec.paramKind", "give apiVersion and kind"))
	}
	if p.Spec.MatchConstraints == nil || len(p.Spec.MatchConstraints.ResourceRules) == 0 {
		errs = append(errs, doc.Required("spec.matchConstraints.resourceRules", "at least one rule says which resources the policy mutates"))
	} else {
		defaultMatchResources(p.Spec.MatchConstraints)
		errs = append(errs, validateMatchResources(doc, "spec.matchConstraints", p.Spec.MatchConstraints, true)...)
	}
	prog, cerrs := compileProgram(doc, d.baseEnv, programSpec{
		hasParams:       p.Spec.ParamKind != nil,
		variables:       p.Spec.Variables,
		matchConditions: p.Spec.MatchConditions,
		mutations:       p.Spec.Mutations,
		failurePolicy:   p.Spec.FailurePolicy,
		name:            p.Name,
	})
	errs = append(errs, cerrs...)
	if len(errs) > 0 {
		return nil, nil, errs
	}
	return &p, prog, nil
}

func decodeBinding(doc policy.Document) (*admissionv1.MutatingAdmissionPolicyBinding, []error) {
	if err := checkVersion(doc, admissionVersions); err != nil {
		return nil, []error{err}
	}
	var b admissionv1.MutatingAdmissionPolicyBinding
	if err := decodeInto(doc, &b, true); err != nil {
		return nil, []error{err}
	}
	var errs []error
	if err := validateName(doc); err != nil {
		errs = append(errs, err)
	}
	if b.Spec.PolicyName == "" {
		errs = append(errs, doc.Required("spec.policyName", "name the MutatingAdmissionPolicy to bind"))
	}
	if p := b.Spec.ParamRef; p != nil && p.ParameterNotFoundAction == nil && strings.HasSuffix(doc.APIVersion(), "/v1alpha1") {
		// v1alpha1 defaults it (SetDefaults_ParamRef); v1beta1 and v1 require it.
		deny := admissionv1.DenyAction
		p.ParameterNotFoundAction = &deny
	}
	errs = append(errs, validateParamRef(doc, "spec.paramRef", b.Spec.ParamRef)...)
	if b.Spec.MatchResources != nil {
		defaultMatchResources(b.Spec.MatchResources)
		errs = append(errs, validateMatchResources(doc, "spec.matchResources", b.Spec.MatchResources, true)...)
	}
	return &b, errs
}

// defaultTimeout is Kyverno's webhook timeout when the policy gives none.
const defaultTimeout = 10 * time.Second

// compileKyverno decodes, validates and compiles a Kyverno MutatingPolicy or
// NamespacedMutatingPolicy.
func (d *dialect) compileKyverno(doc policy.Document) (*Mutator, []error) {
	if err := checkVersion(doc, kyvernoVersions); err != nil {
		return nil, []error{err}
	}
	var obj kyvernoPolicyDocument
	if err := decodeInto(doc, &obj, true); err != nil {
		return nil, []error{err}
	}
	spec := &obj.Spec
	var errs []error
	errs = append(errs, unimplementedKyvernoFields(doc, spec)...)
	if err := validateName(doc); err != nil {
		errs = append(errs, err)
	}
	namespaced := doc.Kind() == kindNamespacedMutating
	if namespaced && doc.Namespace() == "" {
		errs = append(errs, doc.Required("metadata.namespace", "a NamespacedMutatingPolicy mutates the objects of its namespace; give it"))
	}
	if err := validateFailurePolicy(doc, &spec.FailurePolicy); err != nil {
		errs = append(errs, err)
	}
	if err := validateReinvocation(doc, spec.ReinvocationPolicy); err != nil {
		errs = append(errs, err)
	}
	order, err := orderOf(doc)
	if err != nil {
		errs = append(errs, err)
	}
	if spec.MatchConstraints == nil || len(spec.MatchConstraints.ResourceRules) == 0 {
		errs = append(errs, doc.Required("spec.matchConstraints.resourceRules", "at least one rule says which resources the policy mutates"))
	} else {
		defaultMatchResources(spec.MatchConstraints)
		// DELETE is accepted: Kyverno uses it as the trigger of mutateExisting.
		errs = append(errs, validateMatchResources(doc, "spec.matchConstraints", spec.MatchConstraints, false)...)
	}
	m := &Mutator{
		id:        engine.ID{Order: order, Dialect: "cel", Kind: doc.Kind(), Name: doc.Name()},
		d:         d,
		failure:   *spec.FailurePolicy,
		reinvoke:  reinvocationOf(spec.ReinvocationPolicy),
		kyverno:   true,
		admission: true,
		timeout:   defaultTimeout,

		skipBackground: true,
		readsNamespace: mentionsNamespaceObject(doc),
	}
	if namespaced {
		m.id.Namespace = doc.Namespace()
		m.namespace = doc.Namespace()
	}
	if ev := spec.Evaluation; ev != nil {
		if ev.Admission != nil && ev.Admission.Enabled != nil {
			m.admission = *ev.Admission.Enabled
		}
		if ev.SkipBackgroundRequests != nil {
			m.skipBackground = *ev.SkipBackgroundRequests
		}
		if ev.MutateExisting != nil {
			m.existing = ev.MutateExisting.Enabled
			if spec.TargetMatchConstraints == nil && ev.MutateExisting.TargetMatchConstraints != nil {
				spec.TargetMatchConstraints = &kyvernoTargetMatchConstraints{MatchResources: *ev.MutateExisting.TargetMatchConstraints}
			}
		}
	}
	if tc := spec.TargetMatchConstraints; tc != nil {
		t := &tc.MatchResources
		if len(t.ResourceRules) == 0 && tc.Expression == "" {
			errs = append(errs, doc.Required("spec.targetMatchConstraints.resourceRules", "at least one rule (or an expression) says which existing resources the policy mutates"))
		}
		defaultMatchResources(t)
		errs = append(errs, validateMatchResources(doc, "spec.targetMatchConstraints", t, false)...)
		if len(t.ResourceRules) > 0 {
			m.targetConstraints = t
		}
		// Kyverno 1.19 (pkg/cel/policies/mpol/engine/predicate.go,
		// NoTargetMatchConstraintPolicy): a policy with target rules or a target
		// expression mutates its targets only, never the trigger at admission.
		m.targetOnly = len(t.ResourceRules) > 0 || tc.Expression != ""
	}

	if wc := spec.WebhookConfiguration; wc != nil && wc.TimeoutSeconds != nil {
		if s := *wc.TimeoutSeconds; s < 1 || s > 30 {
			errs = append(errs, doc.Invalid("spec.webhookConfiguration.timeoutSeconds", int64(s), "out of range; use 1 to 30 seconds"))
		} else {
			m.timeout = time.Duration(s) * time.Second
		}
	}
	// Autogen, as Kyverno 1.19 does it: on for every Pod policy it can rewrite, for all
	// six controllers unless autogen.podControllers.controllers names some (an empty
	// list turns it off).
	if canAutogen(spec.MatchConstraints) {
		names := allControllers
		if ag := spec.Autogen; ag != nil && ag.PodControllers != nil && ag.PodControllers.Controllers != nil {
			names = ag.PodControllers.Controllers
		}
		cs, ferr := parseControllers(field.NewPath("spec", "autogen", "podControllers", "controllers"), names)
		if ferr != nil {
			errs = append(errs, doc.Err(ferr))
		}
		m.controllers = cs
	}
	prog, cerrs := compileKyvernoProgram(doc, d.hosts, m.namespace, programSpec{
		variables:        spec.Variables,
		matchConditions:  spec.MatchConditions,
		mutations:        spec.Mutations,
		failurePolicy:    spec.FailurePolicy,
		name:             doc.Name(),
		auditAnnotations: spec.AuditAnnotations,

		targetMatchConditions: spec.TargetMatchConditions,
		targetExpression:      targetExpression(spec),
	})
	errs = append(errs, cerrs...)
	if len(errs) > 0 {
		return nil, errs
	}
	m.kprog = prog
	base := programSpec{variables: spec.Variables, matchConditions: spec.MatchConditions, mutations: spec.Mutations, failurePolicy: spec.FailurePolicy, name: doc.Name()}
	for _, c := range m.controllers {
		if m.kautogen == nil {
			m.kautogen = map[string]*kyvernoProgram{}
		}
		if _, done := m.kautogen[c.rewrite]; done {
			continue
		}
		aspec, rewritten := autogenSpec(base, c.rewrite)
		ap, aerrs := compileKyvernoProgram(doc, d.hosts, m.namespace, aspec)
		if len(aerrs) > 0 {
			for _, e := range aerrs {
				errs = append(errs, fmt.Errorf("autogen for %s (the policy's expressions rewritten as Kyverno does): %w", c.rewrite, e))
			}
			continue
		}
		ap.rewritten = rewritten
		m.kautogen[c.rewrite] = ap
	}
	if len(errs) > 0 {
		return nil, errs
	}
	m.constraints = spec.MatchConstraints
	r := resolver{store: d.opts.Objects}
	m.targets = r.targetsOf(spec.MatchConstraints.ResourceRules, *spec.MatchConstraints.MatchPolicy == admissionv1.Equivalent)
	if len(m.controllers) > 0 {
		m.autogen = autogenConstraints(spec.MatchConstraints, m.controllers)
		m.targets = append(m.targets, autogenTargets(m.autogen)...)
	}
	if m.existing {
		m.targets = append(m.targets, r.targetsOf(anyOperation(m.selectConstraints()).ResourceRules, true)...)
	}
	return m, nil
}

func targetExpression(spec *kyvernoPolicySpec) string {
	if spec.TargetMatchConstraints == nil {
		return ""
	}
	return spec.TargetMatchConstraints.Expression
}
