package cel

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/morph-dev/morph/internal/engine"
	"github.com/morph-dev/morph/internal/policy"
)

// controller is a pod controller a Pod policy also applies to (Kyverno's autogen).
type controller struct {
	resource string
	gvk      schema.GroupVersionKind
	// rewrite names Kyverno's replacement set: "defaults" (the template at
	// spec.template) or "cronjobs" (at spec.jobTemplate.spec.template).
	rewrite string
}

const (
	rewriteDefaults = "defaults"
	rewriteCronJobs = "cronjobs"
)

var podGVK = schema.GroupVersionKind{Version: "v1", Kind: "Pod"}

var podControllers = map[string]controller{
	"deployments":  {"deployments", schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}, rewriteDefaults},
	"daemonsets":   {"daemonsets", schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "DaemonSet"}, rewriteDefaults},
	"statefulsets": {"statefulsets", schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "StatefulSet"}, rewriteDefaults},
	"replicasets":  {"replicasets", schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "ReplicaSet"}, rewriteDefaults},
	"jobs":         {"jobs", schema.GroupVersionKind{Group: "batch", Version: "v1", Kind: "Job"}, rewriteDefaults},
	"cronjobs":     {"cronjobs", schema.GroupVersionKind{Group: "batch", Version: "v1", Kind: "CronJob"}, rewriteCronJobs},
}

// allControllers is what autogen applies to when the policy names none.
var allControllers = []string{"cronjobs", "daemonsets", "deployments", "jobs", "replicasets", "statefulsets"}

// parseControllers reads autogen.podControllers.controllers; names are lower-case
// plurals (kinds are accepted too). A name that is no pod controller is left out, as
// Kyverno 1.19 does (pkg/cel/autogen ResolveConfig ignores it; autogenWarnings says
// so); a custom controller written resource.version.group is an error, since morph
// does not do Kyverno's structural extraction of its pod template.
func parseControllers(path *field.Path, names []string) ([]controller, *field.Error) {
	var out []controller
	for i, n := range names {
		if isCustomController(n) {
			return nil, field.Invalid(path.Index(i), n, "custom pod controllers (resource.version.group) are not supported by morph; use deployments, daemonsets, statefulsets, replicasets, jobs or cronjobs")
		}
		c, ok := lookupController(n)
		if !ok {
			continue
		}
		if !slices.ContainsFunc(out, func(o controller) bool { return o.resource == c.resource }) {
			out = append(out, c)
		}
	}
	slices.SortFunc(out, func(a, b controller) int { return strings.Compare(a.resource, b.resource) })
	return out, nil
}

func lookupController(name string) (controller, bool) {
	key := strings.ToLower(name)
	if !strings.HasSuffix(key, "s") {
		key += "s"
	}
	c, ok := podControllers[key]
	return c, ok
}

// isCustomController reports Kyverno's explicit resource.version.group form.
func isCustomController(name string) bool {
	parts := strings.SplitN(name, ".", 3)
	return len(parts) == 3 && parts[0] != "" && parts[1] != "" && parts[2] != ""
}

// autogenWarnings names the autogen.podControllers.controllers that are no pod
// controller: Kyverno ignores them, and so does morph, but says so.
func autogenWarnings(doc policy.Document) []string {
	names, _, _ := unstructured.NestedStringSlice(doc.Object, "spec", "autogen", "podControllers", "controllers")
	var out []string
	for i, n := range names {
		if _, ok := lookupController(n); !ok && !isCustomController(n) {
			out = append(out, fmt.Sprintf("%s: spec.autogen.podControllers.controllers[%d]: %q is not a pod controller and is ignored, as Kyverno ignores it: use deployments, daemonsets, statefulsets, replicasets, jobs or cronjobs", doc.Where(), i, n))
		}
	}
	return out
}

func controllerOf(cs []controller, gvk schema.GroupVersionKind) *controller {
	for i := range cs {
		if cs[i].gvk == gvk {
			return &cs[i]
		}
	}
	return nil
}

// canAutogen reports whether Kyverno generates the controller rules of a policy
// (pkg/cel/autogen CanAutoGen): exactly one rule, for pods of the core group v1 with no
// resource names, no exclusions and no object selector.
func canAutogen(m *admissionv1.MatchResources) bool {
	if m == nil || len(m.ExcludeResourceRules) != 0 || len(m.ResourceRules) != 1 {
		return false
	}
	if s := m.ObjectSelector; s != nil && (len(s.MatchLabels) > 0 || len(s.MatchExpressions) > 0) {
		return false
	}
	r := m.ResourceRules[0]
	return len(r.ResourceNames) == 0 &&
		slices.Equal(r.APIGroups, []string{""}) &&
		slices.Equal(r.APIVersions, []string{"v1"}) &&
		slices.Equal(r.Resources, []string{"pods"})
}

// autogenConstraints are the match constraints of the controller rules, as Kyverno
// builds them (CreateMatchConstraints): one rule per group/version with the pod rule's
// operations, and the pod rule's namespaceSelector.
func autogenConstraints(c *admissionv1.MatchResources, cs []controller) *admissionv1.MatchResources {
	out := &admissionv1.MatchResources{}
	if c.NamespaceSelector != nil {
		out.NamespaceSelector = c.NamespaceSelector.DeepCopy()
	}
	byGV := map[schema.GroupVersion][]string{}
	var gvs []schema.GroupVersion
	for _, ctrl := range cs {
		gv := ctrl.gvk.GroupVersion()
		if _, ok := byGV[gv]; !ok {
			gvs = append(gvs, gv)
		}
		byGV[gv] = append(byGV[gv], ctrl.resource)
	}
	slices.SortFunc(gvs, func(a, b schema.GroupVersion) int { return strings.Compare(a.String(), b.String()) })
	for _, gv := range gvs {
		res := byGV[gv]
		slices.Sort(res)
		out.ResourceRules = append(out.ResourceRules, admissionv1.NamedRuleWithOperations{RuleWithOperations: admissionv1.RuleWithOperations{
			Operations: c.ResourceRules[0].Operations,
			Rule:       admissionv1.Rule{APIGroups: []string{gv.Group}, APIVersions: []string{gv.Version}, Resources: res},
		}})
	}
	defaultMatchResources(out)
	return out
}

// autogenTargets lists the engine targets of the controllers.
func autogenTargets(c *admissionv1.MatchResources) []engine.Target {
	return resolver{}.targetsOf(c.ResourceRules, false)
}

var (
	specRef        = regexp.MustCompile(`\b(object|oldObject|Object)\.spec`)
	labelsRef      = regexp.MustCompile(`\b(object|oldObject|Object)\.metadata\.labels`)
	annotationsRef = regexp.MustCompile(`\b(object|oldObject|Object)\.metadata\.annotations`)
)

// rewriteForController rewrites a Pod policy's expression for a controller, as Kyverno
// 1.19's mpol autogen does (only matchConditions and ApplyConfiguration expressions are
// rewritten; variables and JSON patches are not): object.spec, oldObject.spec and
// Object.spec lead to the template's spec, their metadata.labels and
// metadata.annotations to the template's, and a leading Object{...} is wrapped in the
// controller's structure down to the template. Everything else, object.metadata.name
// and .namespace among it, stays the controller's.
func rewriteForController(expr, set string) string {
	spec, meta := "spec.template.spec", "spec.template.metadata"
	wrapOpen, wrapClose := "Object{spec: Object.spec{template: Object.spec.template{", "}}}"
	if set == rewriteCronJobs {
		spec, meta = "spec.jobTemplate.spec.template.spec", "spec.jobTemplate.spec.template.metadata"
		wrapOpen = "Object{spec: Object.spec{jobTemplate: Object.spec.jobTemplate{spec: Object.spec.jobTemplate.spec{template: Object.spec.jobTemplate.spec.template{"
		wrapClose = "}}}}}"
	}
	expr = specRef.ReplaceAllString(expr, "${1}."+spec)
	expr = labelsRef.ReplaceAllString(expr, "${1}."+meta+".labels")
	expr = annotationsRef.ReplaceAllString(expr, "${1}."+meta+".annotations")
	rest, ok := strings.CutPrefix(strings.TrimSpace(expr), "Object")
	if !ok {
		return expr
	}
	body, ok := strings.CutPrefix(strings.TrimLeft(rest, " \t\r\n"), "{")
	if !ok {
		return expr
	}
	// The first brace that closes the literal, counting braces only (as Kyverno does,
	// so a brace inside a string literal counts too).
	depth := 1
	for i, c := range body {
		switch c {
		case '{':
			depth++
		case '}':
			depth--
		}
		if depth == 0 {
			if i == 0 {
				return expr
			}
			return wrapOpen + body[:i] + wrapClose + body[i+1:]
		}
	}
	return expr
}

// autogenSpec is the policy's program spec rewritten for one replacement set.
func autogenSpec(spec programSpec, set string) (programSpec, []string) {
	out := spec
	var rewritten []string
	out.matchConditions = slices.Clone(spec.matchConditions)
	for i := range out.matchConditions {
		e := rewriteForController(out.matchConditions[i].Expression, set)
		if e != out.matchConditions[i].Expression {
			rewritten = append(rewritten, fmt.Sprintf("matchConditions[%d]: %s", i, e))
		}
		out.matchConditions[i].Expression = e
	}
	out.mutations = make([]admissionv1.Mutation, len(spec.mutations))
	for i, m := range spec.mutations {
		m = *m.DeepCopy()
		if m.ApplyConfiguration != nil && m.ApplyConfiguration.Expression != "" {
			e := rewriteForController(m.ApplyConfiguration.Expression, set)
			if e != m.ApplyConfiguration.Expression {
				rewritten = append(rewritten, fmt.Sprintf("mutations[%d]: %s", i, e))
			}
			m.ApplyConfiguration.Expression = e
		}
		out.mutations[i] = m
	}
	return out, rewritten
}
