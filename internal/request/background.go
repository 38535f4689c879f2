package request

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/morph-dev/morph/internal/engine"
)

// Objects reads objects that exist: offline the --existing and --context objects, in a
// cluster informers or the API server.
type Objects = engine.Objects

// Target names one existing object to mutate, and the route of the write (Resource
// with SubResource, e.g. "status").
type Target = engine.ObjectRef

// Work is one background mutation: a policy, a target, and the admission request that
// triggered it (nil for the scan when a policy is created or changed). It is
// JSON-serializable, so that a cluster can persist it and work survives a leader
// change.
type Work struct {
	Policy  engine.ID       `json:"policy"`
	Target  Target          `json:"target"`
	Trigger *engine.Request `json:"trigger,omitempty"`
}

// backgroundPolicies lists, in the engine's order, the policies that mutate existing
// objects.
func backgroundPolicies(p Policies) []engine.Mutator {
	var out []engine.Mutator
	if p.Set == nil {
		return nil
	}
	for _, m := range p.Set.Mutators() {
		if m.Background != nil {
			out = append(out, m)
		}
	}
	return out
}

// Triggered lists the work an admitted request triggers (Kyverno 1.19
// pkg/webhooks/resource/mpol/handler.go: an UpdateRequest per matched policy, then
// pkg/background/mpol/processor.go: one mutation per target). req is the request as
// admitted: on CREATE and UPDATE its object after mutation, on DELETE Object nil and
// OldObject the deleted object. Policies off at admission are not triggered by it; a
// dry-run request triggers nothing (handler.go honours SideEffects NoneOnDryRun); a
// request of p.BackgroundUser does not trigger the policies that skip background
// requests. The order is the engine's order of policies, then the order of their
// targets.
func Triggered(ctx context.Context, p Policies, req *engine.Request, objs Objects) ([]Work, error) {
	if req.DryRun {
		return nil, nil
	}
	fromBackground := p.BackgroundUser != "" && req.UserInfo.Username == p.BackgroundUser
	var out []Work
	for _, m := range backgroundPolicies(p) {
		if m.AdmissionOff || m.Background.Triggers == nil || (fromBackground && m.Background.SkipBackgroundRequests) {
			continue
		}
		ok, err := m.Background.Triggers(ctx, req)
		if err != nil {
			return out, fmt.Errorf("%s: trigger: %w", m.ID, err)
		}
		if !ok {
			continue
		}
		work, err := targetsOf(ctx, m, req, objs)
		if err != nil {
			return out, err
		}
		out = append(out, work...)
	}
	return out, nil
}

// Scan lists the work of a policy created or changed (Kyverno 1.19
// pkg/policy/mpol.go): its existing targets, each with no trigger; for a policy whose
// targets come from an expression, the targets of each existing trigger object, each
// with that object's UPDATE request as trigger.
func Scan(ctx context.Context, p Policies, policy engine.ID, objs Objects) ([]Work, error) {
	for _, m := range backgroundPolicies(p) {
		if m.ID != policy {
			continue
		}
		if !m.Background.Expression {
			return targetsOf(ctx, m, nil, objs)
		}
		if m.Background.ScanTriggers == nil {
			return nil, fmt.Errorf("%s: its targets come from an expression, and it lists no triggers to scan", m.ID)
		}
		triggers, err := m.Background.ScanTriggers(ctx, objs)
		if err != nil {
			return nil, fmt.Errorf("%s: listing triggers: %w", m.ID, err)
		}
		var out []Work
		for _, t := range triggers {
			work, err := targetsOf(ctx, m, t, objs)
			if err != nil {
				return out, err
			}
			out = append(out, work...)
		}
		return out, nil
	}
	return nil, fmt.Errorf("%s: no loaded policy of that name mutates existing objects", policy)
}

func targetsOf(ctx context.Context, m engine.Mutator, trigger *engine.Request, objs Objects) ([]Work, error) {
	if m.Background.Targets == nil {
		return nil, nil
	}
	targets, err := m.Background.Targets(ctx, trigger, objs)
	if err != nil {
		return nil, fmt.Errorf("%s: targets: %w", m.ID, err)
	}
	out := make([]Work, 0, len(targets))
	for _, t := range targets {
		out = append(out, Work{Policy: m.ID, Target: t, Trigger: trigger})
	}
	return out, nil
}

// Background evaluates one work item on its target as read now (the caller re-reads
// the target on a conflict and calls again): the policy alone, with `object` the
// target, `oldObject` null and `request` the trigger's admission request (for a scan, an
// UPDATE request of the target itself, as Kyverno builds). A result whose Patch is
// empty writes nothing. target nil (the object is gone) is no work: a nil result.
func Background(ctx context.Context, p Policies, w Work, target map[string]any) (*engine.Result, error) {
	if target == nil {
		return nil, nil
	}
	t := w.Target
	trigger := w.Trigger
	if trigger == nil {
		trigger = &engine.Request{
			Kind: t.Kind, Resource: t.Resource, SubResource: t.SubResource,
			Operation: engine.Update, Namespace: t.Namespace, Name: t.Name, Object: target,
		}
	}
	req := &engine.Request{
		Kind:        t.Kind,
		Resource:    t.Resource,
		SubResource: t.SubResource,
		// The target is evaluated under the trigger's operation, as Kyverno's
		// processor builds its attributes (the target rules' operations must allow it).
		Operation:  trigger.Operation,
		Namespace:  t.Namespace,
		Name:       t.Name,
		Object:     target,
		UserInfo:   trigger.UserInfo,
		Source:     engine.SourceOriginal,
		Background: true,
		Policy:     &w.Policy,
		Trigger:    trigger,
	}
	return p.Set.Mutate(ctx, req)
}

// BackgroundResources lists every resource (with its subresource route) the loaded
// policies may list, watch or write in the background: their target resources, and the
// trigger resources of those whose targets come from an expression (scanned when the
// policy is created). Once each, in the order of the policies.
func BackgroundResources(p Policies) []Target {
	var out []Target
	seen := map[[2]schema.GroupVersionResource]string{}
	add := func(t Target) {
		key := [2]schema.GroupVersionResource{t.Resource, {Resource: t.SubResource}}
		if _, ok := seen[key]; ok {
			return
		}
		seen[key] = ""
		out = append(out, Target{Resource: t.Resource, Kind: t.Kind, SubResource: t.SubResource})
	}
	for _, m := range backgroundPolicies(p) {
		for _, t := range m.Background.TargetResources {
			add(t)
		}
		if m.Background.Expression {
			for _, t := range m.Background.TriggerResources {
				add(t)
			}
		}
	}
	return out
}
