package globalcontext

import (
	"context"
	"log/slog"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/retry"
)

// resyncStatus is how often the status writer checks every entry even when nothing
// changed: a write that failed, or a status edited by hand, is put back.
const resyncStatus = 30 * time.Second

// The status Kyverno's types define for a GlobalContextEntry (api/kyverno/v2beta1
// GlobalContextEntryStatus.SetReady): condition Ready, reason Succeeded or Failed.
const (
	conditionReady  = "Ready"
	reasonSucceeded = "Succeeded"
	reasonFailed    = "Failed"
)

// StatusWriter writes the status of the GlobalContextEntries this replica reads:
// lastRefreshTime, the time of an apiCall entry's last successful call (as Kyverno's
// externalapi entries write it after each successful refresh), and condition Ready
// (True, reason Succeeded; or False, reason Failed with the error of the last call, or
// of the kubernetesResource's list). It writes through the status subresource, from the
// cached object's resourceVersion (a conflict reads the entry again), and only when the
// status would change. Only the leader runs it: the leader-election callback calls Run
// with a context that ends when the lease is lost.
type StatusWriter struct {
	Source *Source
	// Events, when set, gets a Warning Event on an entry each time its Ready condition
	// turns False or its error changes, with Kyverno's reason (PolicyError): Kyverno
	// emits one on every failed call, morph only on change.
	Events record.EventRecorder
	Logger *slog.Logger
}

// maxMessage is the longest condition message Kyverno's CRD accepts
// (metav1.Condition's maxLength).
const maxMessage = 32768

// reasonEvent is the reason of Kyverno's globalcontext error Events.
const reasonEvent = "PolicyError"

// Run writes statuses whenever an apiCall answers or a kubernetesResource's informer
// syncs or fails, and every 30 s, until ctx ends.
func (w *StatusWriter) Run(ctx context.Context) {
	log := w.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	t := time.NewTicker(resyncStatus)
	defer t.Stop()
	log.Info("GlobalContextEntry status writer started")
	defer log.Info("GlobalContextEntry status writer stopped")
	for {
		w.writeAll(ctx, log)
		select {
		case <-ctx.Done():
			return
		case <-w.Source.changed:
		case <-t.C:
		}
	}
}

// writeAll brings the status of every entry this replica knows about up to date.
func (w *StatusWriter) writeAll(ctx context.Context, log *slog.Logger) {
	s := w.Source
	s.mu.Lock()
	inf := s.entries
	s.mu.Unlock()
	if inf == nil || !inf.HasSynced() {
		return // no policy read an entry yet
	}
	for _, o := range inf.GetStore().List() {
		if ctx.Err() != nil {
			return
		}
		cached, ok := o.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		if err := w.write(ctx, cached); err != nil && ctx.Err() == nil {
			log.Error("writing GlobalContextEntry status", "entry", cached.GetName(), "error", err)
		}
	}
}

// entryStatus is the part of an entry's status morph writes.
type entryStatus struct {
	ready   bool
	message string
	// refreshed is lastRefreshTime, zero when morph has none to write.
	refreshed time.Time
}

// want is the status an entry should have, false when this replica knows nothing of
// it (no policy read it yet).
func (s *Source) want(entry *unstructured.Unstructured) (entryStatus, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	spec, _, _ := unstructured.NestedMap(entry.Object, "spec")
	if _, isCall := spec["apiCall"].(map[string]any); isCall {
		st, ok := s.apiCalls[entry.GetName()]
		if !ok {
			return entryStatus{}, false
		}
		if st.err != nil {
			return entryStatus{message: st.err.Error(), refreshed: st.refreshed}, true
		}
		return entryStatus{ready: true, message: "Ready", refreshed: st.refreshed}, true
	}
	kr, ok := spec["kubernetesResource"].(map[string]any)
	if !ok {
		return entryStatus{}, false
	}
	group, _ := kr["group"].(string)
	version, _ := kr["version"].(string)
	res, _ := kr["resource"].(string)
	ns, _ := kr["namespace"].(string)
	_, key := entryResource(group, version, res, ns)
	if inf := s.resources[key]; inf != nil && inf.HasSynced() {
		return entryStatus{ready: true, message: "Ready"}, true
	}
	if f, ok := s.failed[key]; ok {
		return entryStatus{message: f.err.Error()}, true
	}
	return entryStatus{}, false
}

// write updates one entry's status when it differs from what it should be.
func (w *StatusWriter) write(ctx context.Context, cached *unstructured.Unstructured) error {
	want, ok := w.Source.want(cached)
	if !ok {
		return nil
	}
	client := w.Source.client.Resource(EntryResource)
	obj := cached
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		updated, changed := withStatus(obj, want, time.Now())
		if !changed {
			return nil
		}
		_, err := client.UpdateStatus(ctx, updated, metav1.UpdateOptions{FieldManager: "morph"})
		if err == nil && !want.ready && w.Events != nil && readyChanged(obj, updated) {
			w.Events.Event(updated, corev1.EventTypeWarning, reasonEvent, want.message)
		}
		if apierrors.IsConflict(err) {
			// The cache is behind (often our own last write): read the entry again.
			fresh, gerr := client.Get(ctx, cached.GetName(), metav1.GetOptions{})
			if gerr != nil {
				return gerr
			}
			obj = fresh
		}
		if apierrors.IsNotFound(err) {
			return nil // deleted meanwhile
		}
		return err
	})
}

// readyChanged reports whether the Ready condition's status or message differs
// between two versions of an entry.
func readyChanged(before, after *unstructured.Unstructured) bool {
	ready := func(u *unstructured.Unstructured) map[string]any {
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		for _, c := range conds {
			if m, ok := c.(map[string]any); ok && m["type"] == conditionReady {
				return m
			}
		}
		return nil
	}
	a, b := ready(before), ready(after)
	return a == nil || b == nil || a["status"] != b["status"] || a["message"] != b["message"]
}

// withStatus returns a copy of entry with status want, and whether that changes it.
// lastTransitionTime moves only when the condition's status does.
func withStatus(entry *unstructured.Unstructured, want entryStatus, now time.Time) (*unstructured.Unstructured, bool) {
	old, _, _ := unstructured.NestedMap(entry.Object, "status")
	status := map[string]any{}
	maps.Copy(status, old)
	message := want.message
	if len(message) > maxMessage {
		message = message[:maxMessage-3] + "..."
	}
	cond := map[string]any{
		"type":    conditionReady,
		"status":  string(metav1.ConditionFalse),
		"reason":  reasonFailed,
		"message": message,
	}
	if want.ready {
		cond["status"], cond["reason"] = string(metav1.ConditionTrue), reasonSucceeded
	}
	conds, _ := status["conditions"].([]any)
	var prev map[string]any
	others := []any{}
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == conditionReady {
			prev = m
			continue
		}
		others = append(others, c)
	}
	changed := prev == nil || prev["status"] != cond["status"] || prev["reason"] != cond["reason"] || prev["message"] != cond["message"]
	cond["lastTransitionTime"] = now.UTC().Format(time.RFC3339)
	if prev != nil && prev["status"] == cond["status"] {
		if t, ok := prev["lastTransitionTime"].(string); ok {
			cond["lastTransitionTime"] = t
		}
	}
	status["conditions"] = append(others, cond)
	// Kyverno's SetReady drops the deprecated status.ready.
	if _, ok := status["ready"]; ok {
		delete(status, "ready")
		changed = true
	}
	if !want.refreshed.IsZero() {
		t := want.refreshed.UTC().Format(time.RFC3339)
		if status["lastRefreshTime"] != t {
			status["lastRefreshTime"] = t
			changed = true
		}
	}
	if !changed {
		return entry, false
	}
	out := entry.DeepCopy()
	out.Object["status"] = status
	return out, true
}
