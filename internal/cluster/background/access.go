package background

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/morph-dev/morph/internal/engine"
)

// ReasonPermissionMissing is the Warning Event on a policy whose objects morph may not
// read or write: the check Kyverno makes when a mutateExisting policy is installed.
const ReasonPermissionMissing = "BackgroundPermissionMissing"

// AccessReviewer says whether morph may do a verb on a resource, or on one of its
// subresources (a SelfSubjectAccessReview in a cluster).
type AccessReviewer interface {
	Allowed(ctx context.Context, verb string, resource schema.GroupVersionResource, subresource string) (bool, error)
}

// access is one permission the background controller needs.
type access struct {
	verb        string
	resource    schema.GroupVersionResource
	subresource string
}

func (a access) String() string {
	r := a.resource.Resource
	if a.subresource != "" {
		r += "/" + a.subresource
	}
	if a.resource.Group != "" {
		r += "." + a.resource.Group
	}
	return a.verb + " " + r
}

// targetAccess lists what mutating the targets of a policy takes: get and list on the
// resource, update on the route of the write. Wildcard resources are not checked.
func targetAccess(targets []engine.ObjectRef) []access {
	var out []access
	for _, t := range targets {
		r := t.Resource
		if r.Group == "*" || r.Resource == "*" || r.Version == "*" {
			continue
		}
		out = append(out, access{"get", r, ""}, access{"list", r, ""}, access{"update", r, t.SubResource})
	}
	return out
}

// reconcileAccess lists what reconciling a resource takes.
func reconcileAccess(r schema.GroupVersionResource) []access {
	return []access{{"get", r, ""}, {"list", r, ""}, {"watch", r, ""}, {"update", r, ""}}
}

// checkAccess reviews the permissions the work of policies needs and, when some are
// missing, says so in a Warning Event on each policy and in the log. The work is
// still tried: its failures are reported as they happen.
func (c *Controller) checkAccess(ctx context.Context, ids []engine.ID, needed []access) {
	if c.opts.Access == nil || len(needed) == 0 {
		return
	}
	var missing []string
	for _, a := range needed {
		ok, err := c.opts.Access.Allowed(ctx, a.verb, a.resource, a.subresource)
		if err != nil {
			c.log.Warn("cannot review morph's permissions", "permission", a.String(), "error", err)
			return
		}
		if !ok {
			missing = append(missing, a.String())
		}
	}
	if len(missing) == 0 {
		return
	}
	msg := fmt.Sprintf("morph may not %s: grant it to morph's ServiceAccount (docs/cluster.md, RBAC of the background controller)", strings.Join(missing, ", "))
	for _, id := range ids {
		c.log.Warn("permissions missing for background work", "policy", id.String(), "missing", strings.Join(missing, ", "))
		c.policyEvent(id, corev1.EventTypeWarning, ReasonPermissionMissing, msg)
	}
}
