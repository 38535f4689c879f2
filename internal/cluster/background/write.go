package background

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"

	"github.com/morph-dev/morph/internal/engine"
	"github.com/morph-dev/morph/internal/request"
)

// Event reasons of the background controller.
const (
	// ReasonFailed is the Warning Event on a policy whose background work failed every
	// attempt.
	ReasonFailed = "BackgroundMutationFailed"
	// ReasonDenied is the Warning Event on a reconciled object that its validation
	// rules refuse: it is not mutated (validation runs first unless mutateFirst).
	ReasonDenied = "ReconcileDenied"
)

// FieldManager is the field manager of morph's background writes.
const FieldManager = "morph-background"

// errConflicts is the error of a write that met a conflict ConflictRetries times in a
// row: the item goes back to the rate-limited queue.
var errConflicts = errors.New("the object kept changing between read and write (conflicts)")

// written is the outcome of one write loop.
type written struct {
	outcome string
	result  *engine.Result
	object  map[string]any // the object as written
}

// evaluate computes the change of an object as read now; a nil result or one
// without patch writes nothing.
type evaluate func(obj map[string]any) (*engine.Result, error)

// write reads the target, evaluates it and writes the change with the resourceVersion
// it read as precondition (an update: the API server refuses it with a conflict when
// the object changed since). On a conflict it reads and evaluates again, at most
// ConflictRetries times. The target's SubResource is the route of the write.
func (c *Controller) write(ctx context.Context, source string, target request.Target, eval evaluate) (written, error) {
	ri := c.opts.Client.Resource(target.Resource).Namespace(target.Namespace)
	var sub []string
	if target.SubResource != "" {
		sub = []string{target.SubResource}
	}
	for attempt := 1; ; attempt++ {
		cur, err := ri.Get(ctx, target.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return written{outcome: outcomeGone}, nil
		}
		if err != nil {
			return written{}, fmt.Errorf("reading %s: %w", target, err)
		}
		res, err := eval(cur.Object)
		if err != nil {
			return written{}, err
		}
		if res == nil || !res.Changed() {
			return written{outcome: outcomeUnchanged, result: res}, nil
		}
		next := &unstructured.Unstructured{Object: res.Object}
		// The precondition: the version read, whatever the policy did to metadata.
		next.SetResourceVersion(cur.GetResourceVersion())
		_, err = ri.Update(ctx, next, metav1.UpdateOptions{FieldManager: FieldManager}, sub...)
		switch {
		case err == nil:
			return written{outcome: outcomeWritten, result: res, object: res.Object}, nil
		case apierrors.IsConflict(err):
			c.metrics.conflicts.WithLabelValues(source).Inc()
			if attempt >= c.opts.ConflictRetries {
				return written{}, fmt.Errorf("writing %s: %w", target, errConflicts)
			}
			continue
		case apierrors.IsNotFound(err):
			return written{outcome: outcomeGone}, nil
		}
		return written{}, fmt.Errorf("writing %s: %w", target, err)
	}
}

// target mutates one target of a policy (a scan's or a trigger's).
func (t *term) target(ctx context.Context, it item) error {
	t.mu.Lock()
	w, ok := t.works[it]
	t.mu.Unlock()
	if !ok {
		return nil
	}
	out, err := t.c.write(ctx, it.source(), w.Target, func(obj map[string]any) (*engine.Result, error) {
		ps := t.c.policies.Load()
		if ps == nil || ps.byID[w.Policy].Background == nil {
			return nil, nil // the policy is gone meanwhile: nothing to do
		}
		return request.Background(ctx, ps.all, w, obj)
	})
	if err != nil {
		return err
	}
	t.c.metrics.work.WithLabelValues(it.source(), out.outcome).Inc()
	if out.outcome == outcomeWritten {
		t.c.log.Debug("mutated an existing object", "policy", w.Policy.String(), "target", w.Target.String())
		t.c.objectEvents(w.Target, out)
	}
	t.targetDone(ctx, it, false)
	return nil
}

// reconcile evaluates one object of a reconciled policy in reconcile mode (validation
// first unless mutateFirst, then the mutation) and writes back what changed, with the
// policies' Events (Katalog's "defaults applied: ...") on the object.
func (t *term) reconcile(ctx context.Context, it item) error {
	var denied []engine.Violation
	out, err := t.c.write(ctx, sourceReconcile, it.target, func(obj map[string]any) (*engine.Result, error) {
		ps := t.c.policies.Load()
		if ps == nil {
			return nil, nil
		}
		req := &engine.Request{
			Kind:      it.target.Kind,
			Resource:  it.target.Resource,
			Operation: engine.Update, // the object exists: an update of itself
			Namespace: it.target.Namespace,
			Name:      it.target.Name,
			Object:    obj,
			OldObject: obj,
			Source:    engine.SourceOriginal,
		}
		req.NamespaceObject = request.NamespaceObject(t.c.opts.Namespaces, req.Kind, req.Namespace, obj, nil, request.Unknown)
		ev, err := request.Evaluate(ctx, ps.all, req, request.Reconcile)
		if err != nil {
			return nil, err
		}
		denied = denied[:0]
		for _, v := range ev.Violations {
			if v.Deny {
				denied = append(denied, v)
			}
		}
		if len(denied) > 0 && !ev.Changed() {
			return nil, nil
		}
		return ev.Result, nil
	})
	if err != nil {
		return err
	}
	if len(denied) > 0 {
		msgs := make([]string, len(denied))
		for i, v := range denied {
			msgs[i] = v.Message
		}
		t.c.metrics.work.WithLabelValues(sourceReconcile, outcomeDenied).Inc()
		t.c.event(objectRef(it.target, nil), corev1.EventTypeWarning, ReasonDenied, strings.Join(msgs, "; "))
		return nil
	}
	t.c.metrics.work.WithLabelValues(sourceReconcile, out.outcome).Inc()
	if out.outcome == outcomeWritten {
		t.c.log.Debug("reconciled an object", "target", it.target.String())
		t.c.objectEvents(it.target, out)
	}
	return nil
}

// objectEvents emits the Events the policies noted for a written object.
func (c *Controller) objectEvents(target request.Target, out written) {
	if out.result == nil {
		return
	}
	ref := objectRef(target, out.object)
	for _, n := range out.result.Notes {
		if n.Kind == engine.NoteEvent {
			c.event(ref, corev1.EventTypeNormal, n.Reason, n.Message)
		}
	}
}

func objectRef(target request.Target, obj map[string]any) *corev1.ObjectReference {
	ref := &corev1.ObjectReference{
		APIVersion: target.Kind.GroupVersion().String(),
		Kind:       target.Kind.Kind,
		Namespace:  target.Namespace,
		Name:       target.Name,
	}
	if obj != nil {
		u := unstructured.Unstructured{Object: obj}
		ref.UID = u.GetUID()
	}
	return ref
}

// event emits one Event when a recorder is set.
func (c *Controller) event(ref *corev1.ObjectReference, typ, reason, message string) {
	if c.opts.Recorder == nil || ref == nil {
		return
	}
	c.opts.Recorder.Event(ref, typ, reason, message)
	c.metrics.events.WithLabelValues(reason).Inc()
}

// policyEvent emits an Event on the object of a policy, when it has one.
func (c *Controller) policyEvent(id engine.ID, typ, reason, message string) {
	if c.opts.Policies == nil {
		return
	}
	ref, _, ok := c.opts.Policies.Object(id)
	if !ok {
		return
	}
	c.event(ref, typ, reason, message)
}

// watchReconciled watches the objects of every reconciled resource (the informer's
// first list queues them all), stops watching those no policy reconciles any more,
// and queues every object of a resource whose policies changed.
func (t *term) watchReconciled(ctx context.Context, wg *sync.WaitGroup, ps *policySet) {
	want := map[schema.GroupVersionResource]reconciledResource{}
	for _, r := range ps.reconciled {
		want[r.resource] = r
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, gvr := range sortedResources(t.watches) {
		if _, ok := want[gvr]; !ok {
			t.watches[gvr]()
			delete(t.watches, gvr)
			delete(t.reconcilers, gvr)
			delete(t.reconciledVersions, gvr)
			t.c.log.Info("no longer reconciling", "resource", gvr.String())
		}
	}
	for _, gvr := range sortedResources(want) {
		r := want[gvr]
		version := t.c.versionOf(ps.reconcilers[gvr])
		if inf, ok := t.reconcilers[gvr]; ok {
			if t.reconciledVersions[gvr] != version {
				// A policy changed: every object again.
				t.reconciledVersions[gvr] = version
				for _, obj := range inf.GetStore().List() {
					t.queueReconcile(r, obj)
				}
			}
			continue
		}
		inf := dynamicinformer.NewFilteredDynamicInformer(t.c.opts.Client, gvr, "", 0, cache.Indexers{}, nil).Informer()
		enqueue := func(obj any) { t.queueReconcile(r, obj) }
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    enqueue,
			UpdateFunc: func(_, obj any) { enqueue(obj) },
		}); err != nil {
			t.c.log.Error("cannot watch the objects to reconcile", "resource", gvr.String(), "error", err)
			continue
		}
		wctx, cancel := context.WithCancel(ctx)
		// The review calls the API server: not under t.mu.
		ids := ps.reconcilers[gvr]
		wg.Go(func() { t.c.checkAccess(wctx, ids, reconcileAccess(gvr)) })
		t.watches[gvr], t.reconcilers[gvr], t.reconciledVersions[gvr] = cancel, inf, version
		t.c.log.Info("reconciling", "resource", gvr.String(), "kind", r.kind.Kind)
		wg.Go(func() { inf.Run(wctx.Done()) })
	}
}

// versionOf is the versions of the policies ids, joined: it changes when one of them
// changes.
func (c *Controller) versionOf(ids []engine.ID) string {
	if c.opts.Policies == nil {
		return ""
	}
	vs := make([]string, 0, len(ids))
	for _, id := range ids {
		_, v, _ := c.opts.Policies.Object(id)
		vs = append(vs, id.String()+"@"+v)
	}
	sort.Strings(vs)
	return strings.Join(vs, ",")
}

// queueReconcile queues the reconcile of an object of a reconciled resource.
func (t *term) queueReconcile(r reconciledResource, obj any) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok || u.GetDeletionTimestamp() != nil {
		return
	}
	kind := r.kind
	if gvk := u.GroupVersionKind(); gvk.Kind != "" {
		kind = gvk
	}
	t.queue.Add(item{kind: kindReconcile, target: request.Target{Resource: r.resource, Kind: kind, Namespace: u.GetNamespace(), Name: u.GetName()}})
}

// stopWatches stops the informers of the reconciled resources.
func (t *term) stopWatches() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for gvr, stop := range t.watches {
		stop()
		delete(t.watches, gvr)
	}
}
