package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/morph-dev/morph/internal/engine"
	"github.com/morph-dev/morph/internal/objects"
	"github.com/morph-dev/morph/internal/offline"
	"github.com/morph-dev/morph/internal/policy"
	"github.com/morph-dev/morph/internal/request"
)

// backgroundRun is what `morph apply` does with objects that exist (--existing, and the
// --context objects): after admission, the work the admitted triggers (or, without
// -f, the policies' creation) give the policies that mutate existing objects, run as
// the cluster's background controller runs it (request.Triggered, request.Scan,
// request.Background), and the targets printed after the triggers.
type backgroundRun struct {
	rt   *offline.Runtime
	objs offline.StoreObjects
	// existing are the --existing objects, in input order (keys known once the store
	// put namespaced objects without a namespace into --namespace: see keys).
	existing []policy.Document
	keys     []objects.Key
	// before holds each object the background changed (and each --existing object) as
	// it was before the background ran; order lists the others in order of change.
	before map[objects.Key]map[string]any
	order  []objects.Key
}

func newBackgroundRun(rt *offline.Runtime, existing []policy.Document) (*backgroundRun, error) {
	for _, d := range existing {
		if err := rt.Store.Add(d.Object); err != nil {
			return nil, fmt.Errorf("%s: %w", d.Where(), err)
		}
	}
	return &backgroundRun{rt: rt, objs: offline.StoreObjects{Store: rt.Store}, existing: existing, before: map[objects.Key]map[string]any{}}, nil
}

// keyOf is the store's key of an object.
func keyOf(obj map[string]any) objects.Key {
	apiVersion, _ := obj["apiVersion"].(string)
	gv, _ := schema.ParseGroupVersion(apiVersion)
	kind, _ := obj["kind"].(string)
	md, _ := obj["metadata"].(map[string]any)
	ns, _ := md["namespace"].(string)
	name, _ := md["name"].(string)
	return objects.Key{Group: gv.Group, Kind: kind, Namespace: ns, Name: name}
}

// start records the --existing objects as stored (after the namespace defaulting).
func (b *backgroundRun) start(namespace string) {
	if b.keys != nil || len(b.existing) == 0 {
		return
	}
	for _, d := range b.existing {
		k := keyOf(d.Object)
		if k.Namespace == "" && b.rt.Store.Namespaced(k.Group, k.Kind) {
			k.Namespace = namespace
		}
		if _, dup := b.before[k]; dup {
			continue
		}
		obj, _ := b.rt.Store.Get(k.Group, k.Kind, k.Namespace, k.Name)
		b.keys = append(b.keys, k)
		b.before[k] = obj
	}
}

// admitted stores an admitted trigger (obj is its object after admission) and lists
// the work it triggers.
func (b *backgroundRun) admitted(ctx context.Context, req *engine.Request, obj map[string]any) ([]request.Work, error) {
	trigger := *req
	trigger.Object = obj
	if req.Operation == engine.Delete {
		trigger.Object = nil
		// Once admitted, the object is gone: the background no longer lists or reads it.
		b.rt.Store.Remove(req.Kind.Group, req.Kind.Kind, req.Namespace, req.Name)
	} else if obj != nil && req.SubResource == "" {
		stored := obj
		if md, _ := obj["metadata"].(map[string]any); req.Namespace != "" && md["namespace"] == nil {
			stored = maps.Clone(obj)
			md = maps.Clone(md)
			if md == nil {
				md = map[string]any{}
			}
			md["namespace"] = req.Namespace
			stored["metadata"] = md
		}
		// Once admitted, the object exists: the background lists and reads it.
		if err := b.rt.Store.Add(stored); err != nil {
			return nil, err
		}
	}
	return request.Triggered(ctx, b.rt.Policies(), &trigger, b.objs)
}

// scan lists the work of every policy that mutates existing objects, as when the
// policies are created.
func (b *backgroundRun) scan(ctx context.Context) ([]request.Work, error) {
	var out []request.Work
	for _, m := range b.rt.Set.Mutators() {
		if m.Background == nil {
			continue
		}
		w, err := request.Scan(ctx, b.rt.Policies(), m.ID, b.objs)
		if err != nil {
			return out, err
		}
		out = append(out, w...)
	}
	return out, nil
}

// run runs the work in order, printing warnings, errors and (explain) traces to
// stderr, and returns the number of work items that failed.
func (b *backgroundRun) run(ctx context.Context, work []request.Work, explainTo bool, stderr io.Writer) int {
	// Each target's state before the background, for the output.
	for _, w := range work {
		obj, err := b.objs.Get(ctx, w.Target.Resource, w.Target.Namespace, w.Target.Name)
		if err != nil || obj == nil {
			continue
		}
		if k := keyOf(obj); b.before[k] == nil {
			b.before[k] = obj
		}
	}
	failed := 0
	for _, d := range b.rt.RunBackground(ctx, work) {
		where := fmt.Sprintf("background %s", d.Work.Policy)
		if t := d.Work.Trigger; t != nil && t.Name != "" {
			where += fmt.Sprintf(", triggered by %s %s %s", t.Operation, t.Kind.Kind, nsName(t.Namespace, t.Name))
		}
		target := d.Work.Target.String()
		if d.Err != nil {
			fmt.Fprintf(stderr, "error: %s (%s): %v\n", target, where, d.Err)
			failed++
			continue
		}
		if d.Result == nil {
			continue
		}
		for _, w := range d.Result.Warnings {
			fmt.Fprintf(stderr, "warning: %s (%s): %s\n", target, where, w)
		}
		if explainTo {
			explain(stderr, target, where, d.Result)
		}
		if d.Result.Changed() {
			k := keyOf(d.Result.Object)
			if !b.isExisting(k) && !slices.Contains(b.order, k) {
				b.order = append(b.order, k)
			}
		}
	}
	return failed
}

func nsName(ns, name string) string {
	if ns == "" {
		return name
	}
	return ns + "/" + name
}

func (b *backgroundRun) isExisting(k objects.Key) bool { return slices.Contains(b.keys, k) }

// target is an object the output shows after the triggers: before and after the
// background.
type target struct{ before, after map[string]any }

// targets lists the --existing objects in input order (changed or not), then the other
// objects the background changed (context objects, admitted triggers), in order of
// first change.
func (b *backgroundRun) targets() []target {
	var out []target
	for _, k := range append(append([]objects.Key{}, b.keys...), b.order...) {
		after, ok := b.rt.Store.Get(k.Group, k.Kind, k.Namespace, k.Name)
		if !ok {
			continue
		}
		before := b.before[k]
		if before == nil {
			before = after
		}
		out = append(out, target{before: before, after: after})
	}
	return out
}
