package policies

import (
	"context"
	"log/slog"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/morph-dev/morph/internal/engine"
)

// Component is the source of morph's Events.
const Component = "morph"

// Events emits Kubernetes Events: a policy's compile outcome on the policy (from the
// status writer, so from the leader only), and a dialect's admission note (Katalog's
// "defaults applied: ...") on the admitted object, from whichever replica admitted it.
// Build it with NewEvents; Stop flushes it.
type Events struct {
	recorder    record.EventRecorder
	broadcaster record.EventBroadcaster
	metrics     *metrics
}

// NewEvents returns an Events writing through client. Events are sent asynchronously,
// rate-limited and aggregated by client-go's broadcaster; a failed send is logged.
func NewEvents(client kubernetes.Interface, src *Source, log *slog.Logger) *Events {
	b := record.NewBroadcaster()
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	if log != nil {
		b.StartEventWatcher(func(e *corev1.Event) {
			log.Debug("event", "object", e.InvolvedObject.Kind+"/"+e.InvolvedObject.Name, "reason", e.Reason, "message", e.Message)
		})
	}
	e := &Events{
		recorder:    b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: Component}),
		broadcaster: b,
	}
	if src != nil {
		e.metrics = src.metrics
	}
	return e
}

// Stop flushes and stops the broadcaster.
func (e *Events) Stop() { e.broadcaster.Shutdown() }

func (e *Events) count(reason string) {
	if e.metrics != nil {
		e.metrics.events.WithLabelValues(reason).Inc()
	}
}

// policyOutcome emits the Event of a policy's new outcome: Warning with the compile
// error when it is not served, Normal otherwise.
func (e *Events) policyOutcome(obj runtime.Object, o Outcome) {
	typ, msg := corev1.EventTypeNormal, "policy compiled and served"
	if !o.Ready {
		typ, msg = corev1.EventTypeWarning, o.Message
	} else if o.Message != "" {
		msg = o.Message
	}
	e.recorder.Event(obj, typ, o.Reason, msg)
	e.count(o.Reason)
}

// Admission emits a Normal Event on the object of an admission request, with a dialect's
// reason and text. It emits nothing for a dry-run request, nor for an object without a
// name yet (generateName: the name is chosen after admission).
func (e *Events) Admission(_ context.Context, req *engine.Request, reason, message string) {
	if req.DryRun {
		return
	}
	name := req.Name
	var uid types.UID
	if md, ok := req.Object["metadata"].(map[string]any); ok {
		if name == "" {
			name, _ = md["name"].(string)
		}
		if u, ok := md["uid"].(string); ok {
			uid = types.UID(u)
		}
	}
	if name == "" {
		return
	}
	ref := &corev1.ObjectReference{
		APIVersion: req.Kind.GroupVersion().String(),
		Kind:       req.Kind.Kind,
		Namespace:  req.Namespace,
		Name:       name,
		UID:        uid,
	}
	e.recorder.Event(ref, corev1.EventTypeNormal, reason, message)
	e.count(reason)
}
