package cel

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/morph-dev/morph/internal/policy"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// kyvernoLibraries finds the uses of what only Kyverno's CEL environment has in an
// expression: the sdk libraries, cel-go's extensions Kyverno adds, orValue, exceptions
// and request.object.
var kyvernoLibraries = regexp.MustCompile(`\b(resource\.(?:[Gg]et|[Ll]ist|[Pp]ost|[Tt]oGVR)|http\.(?:[Gg]et|[Pp]ost|[Cc]lient)|globalContext\.[Gg]et|image\.[Gg]etMetadata|image|isImage|parseServiceAccount|user\.parseServiceAccount|parseImageReference|json\.(?:unmarshal|marshal)|yaml\.parse|sha256|sha1|md5|hash\.(?:sha256|sha1|md5)|math\.round|random(?:\.random)?|time\.(?:now|toCron|truncate)|listObjToMap|transform\.listObjToMap|x509\.decode|gzip\.(?:compress|decompress)|regex\.(?:replace|extract|extractAll)|math\.(?:greatest|least|abs|ceil|floor|round|sign|trunc|isInf|isNaN|isFinite|bitAnd|bitOr|bitXor|bitNot|bitShiftLeft|bitShiftRight|sqrt)|base64\.(?:encode|decode)|cel\.bind)\s*\(|\bexceptions\.|\brequest\.(?:object|oldObject)\b|\.orValue\s*\(`)

// GenerateMutatingAdmissionPolicies turns the Kyverno MutatingPolicies among docs into
// equivalent Kubernetes MutatingAdmissionPolicies, each followed by a binding of the same
// name (what Kyverno's autogen.mutatingAdmissionPolicy does). A policy using a feature
// only Kyverno has is an error naming the feature. Notes name what was left out without
// changing the result (webhookConfiguration.timeoutSeconds).
func GenerateMutatingAdmissionPolicies(docs []policy.Document) (objs []map[string]any, notes []string, err error) {
	base := newDialect(Options{})
	exempted := map[string]string{}
	for _, doc := range docs {
		if policy.Group(doc.APIVersion()) != groupKyverno || doc.Kind() != kindPolicyException {
			continue
		}
		var ex struct {
			Spec exceptionSpec `json:"spec"`
		}
		if err := decodeInto(doc, &ex, false); err != nil {
			return nil, nil, err
		}
		for _, r := range ex.Spec.PolicyRefs {
			exempted[r.Name] = doc.Name()
		}
	}
	var errs []error
	found := false
	for _, doc := range docs {
		if policy.Group(doc.APIVersion()) != groupKyverno || (doc.Kind() != kindMutatingPolicy && doc.Kind() != kindNamespacedMutating) {
			continue
		}
		found = true
		o, n, err := generateOne(base, doc, exempted[doc.Name()])
		if err != nil {
			errs = append(errs, err)
			continue
		}
		objs = append(objs, o...)
		notes = append(notes, n...)
	}
	if !found && len(errs) == 0 {
		return nil, nil, errors.New("no MutatingPolicy found: give a file holding a policies.kyverno.io MutatingPolicy")
	}
	return objs, notes, errors.Join(errs...)
}

func generateOne(d *dialect, doc policy.Document, exception string) ([]map[string]any, []string, error) {
	if _, errs := d.compileKyverno(doc); len(errs) > 0 {
		return nil, nil, errors.Join(errs...)
	}
	var obj struct {
		Spec kyvernoPolicySpec `json:"spec"`
	}
	if err := decodeInto(doc, &obj, false); err != nil {
		return nil, nil, err
	}
	spec := obj.Spec
	cannot := func(at, feature string) error {
		return doc.Err(field.Forbidden(field.NewPath(at), feature+" exists only in Kyverno; a MutatingAdmissionPolicy cannot express it"))
	}
	switch {
	case doc.Kind() == kindNamespacedMutating:
		return nil, nil, cannot("kind", "NamespacedMutatingPolicy (a policy scoped to its namespace)")
	case exception != "":
		return nil, nil, cannot("metadata.name", fmt.Sprintf("the PolicyException %q naming the policy", exception))
	case spec.Evaluation != nil && spec.Evaluation.MutateExisting != nil && spec.Evaluation.MutateExisting.Enabled:
		return nil, nil, cannot("spec.evaluation.mutateExisting", "mutating existing objects")
	case spec.TargetMatchConstraints != nil:
		return nil, nil, cannot("spec.targetMatchConstraints", "targetMatchConstraints")
	case spec.Evaluation != nil && spec.Evaluation.Admission != nil && spec.Evaluation.Admission.Enabled != nil && !*spec.Evaluation.Admission.Enabled:
		return nil, nil, cannot("spec.evaluation.admission.enabled", "a policy that is off at admission")
	case spec.Autogen != nil && spec.Autogen.PodControllers != nil && len(spec.Autogen.PodControllers.Controllers) > 0:
		return nil, nil, cannot("spec.autogen.podControllers", "autogen for pod controllers")
	}
	exprs := map[string]string{}
	for i, v := range spec.Variables {
		exprs[fmt.Sprintf("spec.variables[%d].expression", i)] = v.Expression
	}
	for i, c := range spec.MatchConditions {
		exprs[fmt.Sprintf("spec.matchConditions[%d].expression", i)] = c.Expression
	}
	for i, m := range spec.Mutations {
		if m.ApplyConfiguration != nil {
			exprs[fmt.Sprintf("spec.mutations[%d].applyConfiguration.expression", i)] = m.ApplyConfiguration.Expression
		}
		if m.JSONPatch != nil {
			exprs[fmt.Sprintf("spec.mutations[%d].jsonPatch.expression", i)] = m.JSONPatch.Expression
		}
	}
	for _, field := range slices.Sorted(maps.Keys(exprs)) {
		if m := kyvernoLibraries.FindStringSubmatch(exprs[field]); m != nil {
			what := fmt.Sprintf("the CEL library function %s()", m[1])
			if m[1] == "" {
				what = fmt.Sprintf("Kyverno's %s", strings.Trim(strings.TrimSpace(m[0]), ".("))
			}
			return nil, nil, cannot(field, what)
		}
	}
	// Whatever else does not compile in the API server's own environment is reported
	// as the API server would.
	if _, errs := compileProgram(doc, d.baseEnv, programSpec{
		variables: spec.Variables, matchConditions: spec.MatchConditions, mutations: spec.Mutations,
		failurePolicy: spec.FailurePolicy, name: doc.Name(),
	}); len(errs) > 0 {
		return nil, nil, errors.Join(errs...)
	}
	var notes []string
	// Kyverno 1.19's default autogen: a Pod policy with no autogen.podControllers also
	// gets rules for the pod templates of the six controllers. The generated
	// MutatingAdmissionPolicy matches Pods only.
	if canAutogen(spec.MatchConstraints) && (spec.Autogen == nil || spec.Autogen.PodControllers == nil || spec.Autogen.PodControllers.Controllers == nil) {
		notes = append(notes, fmt.Sprintf("%s: Kyverno 1.19 also applies this Pod policy to the pod templates of %s (autogen is on by default for Pod policies); the MutatingAdmissionPolicy mutates Pods only, so those controllers' templates stay as written (the Pods they create are still mutated). Set spec.autogen.podControllers.controllers: [] in the MutatingPolicy for Kyverno to do the same", doc.Where(), strings.Join(allControllers, ", ")))
	}
	if spec.WebhookConfiguration != nil && spec.WebhookConfiguration.TimeoutSeconds != nil {
		notes = append(notes, fmt.Sprintf("%s: spec.webhookConfiguration.timeoutSeconds is left out: the API server bounds a MutatingAdmissionPolicy by its CEL cost budget instead", doc.Where()))
	}
	reinvoke := spec.ReinvocationPolicy
	if reinvoke == "" {
		reinvoke = admissionv1.NeverReinvocationPolicy
	}
	failure := spec.FailurePolicy
	if failure == nil {
		f := admissionv1.Fail
		failure = &f
	}
	meta := metav1.ObjectMeta{Name: doc.Name()}
	if md, _ := doc.Object["metadata"].(map[string]any); md != nil {
		if ann, _ := md["annotations"].(map[string]any); ann != nil {
			if v, ok := ann[OrderAnnotation].(string); ok {
				meta.Annotations = map[string]string{OrderAnnotation: v}
			}
		}
	}
	mapObj := admissionv1.MutatingAdmissionPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: groupAdmission + "/v1", Kind: kindMAP},
		ObjectMeta: meta,
		Spec: admissionv1.MutatingAdmissionPolicySpec{
			MatchConstraints:   spec.MatchConstraints,
			Variables:          spec.Variables,
			Mutations:          spec.Mutations,
			FailurePolicy:      failure,
			MatchConditions:    spec.MatchConditions,
			ReinvocationPolicy: reinvoke,
		},
	}
	binding := admissionv1.MutatingAdmissionPolicyBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: groupAdmission + "/v1", Kind: kindMAPBinding},
		ObjectMeta: metav1.ObjectMeta{Name: doc.Name()},
		Spec:       admissionv1.MutatingAdmissionPolicyBindingSpec{PolicyName: doc.Name()},
	}
	var out []map[string]any
	for _, o := range []any{&mapObj, &binding} {
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
		if err != nil {
			return nil, nil, doc.Wrap(nil, nil, fmt.Errorf("cannot encode the generated policy: %w", err))
		}
		md, _ := u["metadata"].(map[string]any)
		delete(md, "creationTimestamp")
		out = append(out, u)
	}
	return out, notes, nil
}
