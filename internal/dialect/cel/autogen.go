package cel

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/morph-dev/morph/internal/engine"
)

// controller is a pod controller a Pod policy also applies to (Kyverno's autogen): its
// pod template is mutated as if it were a Pod.
type controller struct {
	resource string
	gvk      schema.GroupVersionKind
	// path leads from the controller to its pod template.
	path []string
}

var podGVK = schema.GroupVersionKind{Version: "v1", Kind: "Pod"}

var podControllers = map[string]controller{
	"deployments":  {"deployments", schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}, []string{"spec", "template"}},
	"daemonsets":   {"daemonsets", schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "DaemonSet"}, []string{"spec", "template"}},
	"statefulsets": {"statefulsets", schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "StatefulSet"}, []string{"spec", "template"}},
	"replicasets":  {"replicasets", schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "ReplicaSet"}, []string{"spec", "template"}},
	"jobs":         {"jobs", schema.GroupVersionKind{Group: "batch", Version: "v1", Kind: "Job"}, []string{"spec", "template"}},
	"cronjobs":     {"cronjobs", schema.GroupVersionKind{Group: "batch", Version: "v1", Kind: "CronJob"}, []string{"spec", "jobTemplate", "spec", "template"}},
}

// parseControllers reads autogen.podControllers.controllers; names are lower-case
// plurals (kinds are accepted too).
func parseControllers(names []string) ([]controller, error) {
	var out []controller
	for _, n := range names {
		key := strings.ToLower(n)
		if !strings.HasSuffix(key, "s") {
			key += "s"
		}
		c, ok := podControllers[key]
		if !ok {
			return nil, fmt.Errorf("%q is not a pod controller: use deployments, daemonsets, statefulsets, replicasets, jobs or cronjobs", n)
		}
		if !slices.ContainsFunc(out, func(o controller) bool { return o.resource == c.resource }) {
			out = append(out, c)
		}
	}
	return out, nil
}

func controllerOf(cs []controller, gvk schema.GroupVersionKind) *controller {
	for i := range cs {
		if cs[i].gvk == gvk {
			return &cs[i]
		}
	}
	return nil
}

// rulesNamePods reports whether a rule covers Pods themselves (not a subresource).
func rulesNamePods(r admissionv1.NamedRuleWithOperations) bool {
	return (slices.Contains(r.APIGroups, "") || slices.Contains(r.APIGroups, "*")) &&
		(slices.Contains(r.Resources, "pods") || slices.Contains(r.Resources, "*"))
}

// autogenConstraints derives the match constraints of the controllers from a Pod policy's:
// every rule naming pods becomes one rule per controller with the same operations and
// scope (resource names name Pods, so they are dropped); the selectors stay.
func autogenConstraints(c *admissionv1.MatchResources, cs []controller) *admissionv1.MatchResources {
	out := c.DeepCopy()
	derive := func(rules []admissionv1.NamedRuleWithOperations) []admissionv1.NamedRuleWithOperations {
		var res []admissionv1.NamedRuleWithOperations
		for _, r := range rules {
			if !rulesNamePods(r) {
				continue
			}
			for _, ctrl := range cs {
				nr := admissionv1.NamedRuleWithOperations{RuleWithOperations: admissionv1.RuleWithOperations{
					Operations: r.Operations,
					Rule: admissionv1.Rule{
						APIGroups:   []string{ctrl.gvk.Group},
						APIVersions: []string{ctrl.gvk.Version},
						Resources:   []string{ctrl.resource},
						Scope:       r.Scope,
					},
				}}
				res = append(res, nr)
			}
		}
		return res
	}
	out.ResourceRules = derive(c.ResourceRules)
	out.ExcludeResourceRules = derive(c.ExcludeResourceRules)
	return out
}

// autogenTargets lists the engine targets of the controllers.
func autogenTargets(c *admissionv1.MatchResources) []engine.Target {
	return resolver{}.targetsOf(c.ResourceRules, false)
}

// templateOf returns the pod template of a controller object, or nil.
func templateOf(obj map[string]any) map[string]any {
	if obj["kind"] == "CronJob" {
		return templateAt(obj, []string{"spec", "jobTemplate", "spec", "template"})
	}
	return templateAt(obj, []string{"spec", "template"})
}

// templateAt returns the map at path in obj, or nil.
func templateAt(obj map[string]any, path []string) map[string]any {
	var cur any = obj
	for _, k := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[k]
	}
	t, _ := cur.(map[string]any)
	return t
}

// podOf builds the Pod a template describes.
func podOf(tmpl map[string]any) map[string]any {
	pod := map[string]any{"apiVersion": "v1", "kind": "Pod"}
	if md, ok := tmpl["metadata"]; ok {
		pod["metadata"] = md
	} else {
		pod["metadata"] = map[string]any{}
	}
	if spec, ok := tmpl["spec"]; ok {
		pod["spec"] = spec
	}
	return pod
}

// mutateTemplate applies the policy to the pod template of a controller (obj, and old
// for an update): the policy sees the template as a Pod (object and oldObject are the
// templates), its ApplyConfiguration merges with the Pod schema and its JSON patch paths
// are relative to the Pod, which is the same as wrapping the Object{} in the controller's
// structure and prefixing the paths with the template's path.
func (m *Mutator) mutateTemplate(ctx context.Context, req *engine.Request, obj, old map[string]any, inv *invocation) (map[string]any, error) {
	tmpl := templateAt(obj, inv.ctrl.path)
	if tmpl == nil {
		return nil, nil
	}
	var oldPod map[string]any
	if old != nil {
		if ot := templateAt(old, inv.ctrl.path); ot != nil {
			oldPod = podOf(ot)
		}
	}
	newPod, err := m.evaluate(ctx, req, podOf(tmpl), oldPod, inv)
	if err != nil || newPod == nil {
		return nil, err
	}
	nt := maps.Clone(tmpl)
	md, _ := newPod["metadata"].(map[string]any)
	if _, had := tmpl["metadata"]; had || len(md) > 0 {
		nt["metadata"] = md
	}
	if spec, ok := newPod["spec"]; ok {
		nt["spec"] = spec
	} else {
		delete(nt, "spec")
	}
	out := engine.DeepCopyMap(obj)
	parent := out
	for _, k := range inv.ctrl.path[:len(inv.ctrl.path)-1] {
		parent = parent[k].(map[string]any)
	}
	parent[inv.ctrl.path[len(inv.ctrl.path)-1]] = nt
	return out, nil
}
