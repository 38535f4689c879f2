package policies

import (
	"context"
	"log/slog"
	"maps"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
)

// resyncStatus is how often the status writer checks every policy's status even when
// nothing was compiled: a status edited by hand, or a write that failed, is put back.
const resyncStatus = 30 * time.Second

// StatusWriter writes each policy's compile outcome to its status subresource (condition
// Ready, observedGeneration) and emits an Event on the policy when its outcome changes.
// Only the leader runs it: the leader-election callback calls Run with a context that
// ends when the lease is lost.
type StatusWriter struct {
	Source *Source
	// Client writes the status subresource. Required.
	Client dynamic.Interface
	// Events emits Events on policies (none when nil).
	Events *Events
	Logger *slog.Logger
	// Now returns the current time (time.Now when nil).
	Now func() time.Time

	// written is the last outcome written per policy, with the resourceVersion the
	// write returned: when the cached object still has that version, there is nothing to
	// do, even if the status does not show the condition (a CRD of Gatekeeper or Kyverno
	// whose status schema prunes it). Only Run's goroutine uses it.
	written map[types.UID]writtenStatus
}

type writtenStatus struct {
	outcome         Outcome
	resourceVersion string
}

// Run writes statuses after every compilation, and every 30 s, until ctx ends. It
// returns when ctx ends.
func (w *StatusWriter) Run(ctx context.Context) {
	log := w.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if w.written == nil {
		w.written = map[types.UID]writtenStatus{}
	}
	changed := w.Source.Subscribe()
	t := time.NewTicker(resyncStatus)
	defer t.Stop()
	log.Info("policy status writer started")
	defer log.Info("policy status writer stopped")
	for {
		w.writeAll(ctx, log)
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-t.C:
		}
	}
}

func (w *StatusWriter) now() time.Time {
	if w.Now != nil {
		return w.Now()
	}
	return time.Now()
}

// writeAll brings every policy's status up to its outcome.
func (w *StatusWriter) writeAll(ctx context.Context, log *slog.Logger) {
	for _, o := range w.Source.Outcomes() {
		if ctx.Err() != nil {
			return
		}
		if err := w.write(ctx, o); err != nil {
			outcome := "failure"
			if apierrors.IsConflict(err) {
				outcome = "conflict" // the object changed: the next compilation writes again
			}
			w.Source.metrics.statusWrites.WithLabelValues(outcome).Inc()
			if outcome == "failure" {
				log.Error("writing policy status", "policy", o.Ref.String(), "error", err)
			}
		}
	}
}

// write updates one policy's status from the cached object, guarded by its
// resourceVersion, when the Ready condition differs from the outcome.
func (w *StatusWriter) write(ctx context.Context, o Outcome) error {
	cached, ok := w.Source.cached(o.Ref)
	if !ok || cached.GetGeneration() != o.Generation {
		return nil // deleted or changed since compiled: the next compilation writes
	}
	last, wrote := w.written[o.Ref.UID]
	if wrote && sameOutcome(last.outcome, o) && last.resourceVersion == cached.GetResourceVersion() {
		return nil
	}
	want := map[string]any{
		"type":               "Ready",
		"status":             conditionStatus(o.Ready),
		"reason":             o.Reason,
		"message":            o.Message,
		"observedGeneration": o.Generation,
	}
	old, _, _ := unstructured.NestedMap(cached.Object, "status")
	var prev map[string]any
	conds, _, _ := unstructured.NestedSlice(cached.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == "Ready" {
			prev = m
		}
	}
	if prev != nil && sameCondition(prev, want) && toInt64(old["observedGeneration"]) == o.Generation {
		return nil
	}
	want["lastTransitionTime"] = w.now().UTC().Format(time.RFC3339)
	if prev != nil && prev["status"] == want["status"] {
		if t, ok := prev["lastTransitionTime"].(string); ok {
			want["lastTransitionTime"] = t
		}
	}
	obj := cached.DeepCopy()
	status := map[string]any{}
	maps.Copy(status, old)
	var others []any
	for _, c := range conds {
		if m, ok := c.(map[string]any); !ok || m["type"] != "Ready" {
			others = append(others, c)
		}
	}
	status["conditions"] = append(others, want)
	status["observedGeneration"] = o.Generation
	obj.Object["status"] = status
	gvr := schema.GroupVersionResource{Group: o.Ref.Kind.Group, Version: o.Ref.Version, Resource: o.Ref.Kind.Plural}
	ri := dynamic.ResourceInterface(w.Client.Resource(gvr))
	if o.Ref.Namespace != "" {
		ri = w.Client.Resource(gvr).Namespace(o.Ref.Namespace)
	}
	updated, err := ri.UpdateStatus(ctx, obj, metav1.UpdateOptions{FieldManager: "morph"})
	if err != nil {
		return err
	}
	w.Source.metrics.statusWrites.WithLabelValues("success").Inc()
	if w.Events != nil && (!wrote || !sameOutcome(last.outcome, o)) && (prev == nil || !sameCondition(prev, want)) {
		w.Events.policyOutcome(obj, o)
	}
	w.written[o.Ref.UID] = writtenStatus{outcome: o, resourceVersion: updated.GetResourceVersion()}
	return nil
}

func sameCondition(a, b map[string]any) bool {
	for _, k := range []string{"status", "reason", "message"} {
		if a[k] != b[k] {
			return false
		}
	}
	return toInt64(a["observedGeneration"]) == toInt64(b["observedGeneration"])
}

func toInt64(v any) int64 {
	switch x := v.(type) {
	case int64:
		return x
	case float64:
		return int64(x)
	case int:
		return int64(x)
	}
	return -1
}

func conditionStatus(ready bool) string {
	if ready {
		return "True"
	}
	return "False"
}

// sameOutcome reports whether two outcomes of one policy say the same.
func sameOutcome(a, b Outcome) bool {
	return a.Ref.UID == b.Ref.UID && a.Generation == b.Generation && a.Ready == b.Ready &&
		a.Reason == b.Reason && a.Message == b.Message
}
