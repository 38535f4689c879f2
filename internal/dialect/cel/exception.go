package cel

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"

	"github.com/morph-dev/morph/internal/engine"
	"github.com/morph-dev/morph/internal/match"
	"github.com/morph-dev/morph/internal/policy"
)

// exception is a compiled Kyverno PolicyException: it exempts the objects that pass all
// its matchConditions (and, when it lists images, hold an image matching one of them)
// from the policies it names.
type exception struct {
	name, namespace string
	refs            []policyRef
	images          match.Globs
	matcher         matchconditions.Matcher
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

func (d *dialect) compileException(doc policy.Document) (*exception, []error) {
	if err := checkVersion(doc, kyvernoVersions); err != nil {
		return nil, []error{err}
	}
	var obj struct {
		Spec exceptionSpec `json:"spec"`
	}
	if err := decodeInto(doc, &obj, false); err != nil {
		return nil, []error{err}
	}
	var errs []error
	if err := validateName(doc); err != nil {
		errs = append(errs, err)
	}
	ex := &exception{name: doc.Name(), namespace: doc.Namespace()}
	if len(obj.Spec.PolicyRefs) == 0 {
		errs = append(errs, doc.Errorf("spec.policyRefs", "required: name the policies the exception applies to"))
	}
	for i, r := range obj.Spec.PolicyRefs {
		if r.Name == "" {
			errs = append(errs, doc.Errorf(fmt.Sprintf("spec.policyRefs[%d].name", i), "required"))
		}
		ex.refs = append(ex.refs, policyRef{name: r.Name, kind: r.Kind})
	}
	globs, err := match.NewGlobs(obj.Spec.Images)
	if err != nil {
		errs = append(errs, doc.Errorf("spec.images", "%v", err))
	}
	ex.images = globs
	m, cerrs := compileConditions(doc, d.kyvernoEnv, "spec.matchConditions", obj.Spec.MatchConditions, doc.Name())
	errs = append(errs, cerrs...)
	ex.matcher = m
	if len(errs) > 0 {
		return nil, errs
	}
	return ex, nil
}

// exemptedBy returns the first exception (in name order) that exempts the object, or nil.
// An exception whose conditions fail to evaluate does not exempt.
func (m *Mutator) exemptedBy(ctx context.Context, va *admission.VersionedAttributes, req *engine.Request) *exception {
	for _, ex := range m.exceptions {
		if len(ex.images) > 0 {
			u, _ := va.VersionedObject.Object().(*unstructured.Unstructured)
			if u == nil || !anyImageMatches(u.Object, ex.images) {
				continue
			}
		}
		if ex.matcher != nil {
			res := ex.matcher.Match(ctx, va, nil, offlineAuthorizer{})
			if res.Error != nil || !res.Matches {
				continue
			}
		}
		return ex
	}
	return nil
}

// anyImageMatches reports whether a container image of a Pod, or of a pod template, matches.
func anyImageMatches(obj map[string]any, globs match.Globs) bool {
	for _, img := range imagesOf(obj) {
		if globs.Any(img) {
			return true
		}
	}
	return false
}

// imagesOf lists the container images of a Pod or of the pod template of a controller.
func imagesOf(obj map[string]any) []string {
	spec, _ := obj["spec"].(map[string]any)
	if t := templateOf(obj); t != nil {
		spec, _ = t["spec"].(map[string]any)
	}
	var out []string
	for _, field := range []string{"containers", "initContainers", "ephemeralContainers"} {
		list, _ := spec[field].([]any)
		for _, c := range list {
			if img, ok := c.(map[string]any)["image"].(string); ok {
				out = append(out, img)
			}
		}
	}
	return out
}
