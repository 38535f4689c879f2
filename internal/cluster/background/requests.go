package background

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"

	"github.com/morph-dev/morph/internal/cluster/crds"
	"github.com/morph-dev/morph/internal/engine"
	"github.com/morph-dev/morph/internal/request"
	"github.com/morph-dev/morph/internal/webhook"
)

// PolicyLabel is the label of a BackgroundRequest naming its policy (its name, cut to
// a label value's 63 characters), for kubectl get -l.
const PolicyLabel = "morph.dev/policy"

// Admitted records the policies an admitted request triggers (for
// webhook.Options.Admitted, on every replica). It only queues the request: a
// goroutine (RecordTriggers) checks which policies of the call's webhook group it
// triggers and creates one BackgroundRequest per policy, so admission never waits for
// the API server. Requests morph made itself (Options.Self) do not trigger the
// policies that skip background requests (Kyverno's skipBackgroundRequests, the
// default), and a dry run triggers nothing.
func (c *Controller) Admitted(_ context.Context, req *engine.Request, group string, res *engine.Result) {
	if req.DryRun {
		return
	}
	ps := c.policies.Load()
	if ps == nil || len(ps.background) == 0 {
		return
	}
	if res != nil && res.Object != nil {
		// The trigger is the object as admitted, after mutation.
		admitted := *req
		admitted.Object = res.Object
		req = &admitted
	}
	select {
	case c.triggers <- trigger{req: req, group: group}:
	default:
		c.metrics.triggers.WithLabelValues(outcomeDropped).Inc()
		c.log.Error("too many admitted requests waiting to be recorded; this trigger is lost", "kind", req.Kind.Kind, "namespace", req.Namespace, "name", req.Name, "operation", req.Operation)
	}
}

// RecordTriggers creates the BackgroundRequests of the admitted requests until ctx
// ends. Every replica runs it.
func (c *Controller) RecordTriggers(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case tr := <-c.triggers:
			c.record(ctx, tr)
		}
	}
}

// record creates a BackgroundRequest for each policy of the trigger's webhook group
// that the request triggers.
func (c *Controller) record(ctx context.Context, tr trigger) {
	ps := c.policies.Load()
	if ps == nil {
		return
	}
	fromSelf := c.opts.Self != "" && tr.req.UserInfo.Username == c.opts.Self
	for _, id := range ps.background {
		m := ps.byID[id]
		if m.AdmissionOff || m.Background.Triggers == nil {
			continue // off at admission: only the scan of the policy runs it
		}
		if fromSelf && m.Background.SkipBackgroundRequests {
			continue // morph's own write
		}
		if tr.group != "" && webhook.MutationGroup(m.Descriptor) != tr.group {
			continue // another webhook call of the same request records it
		}
		ok, err := m.Background.Triggers(ctx, tr.req)
		if err != nil {
			c.metrics.triggers.WithLabelValues(outcomeFailed).Inc()
			c.log.Error("cannot tell whether a request triggers a policy", "policy", id.String(), "kind", tr.req.Kind.Kind, "namespace", tr.req.Namespace, "name", tr.req.Name, "error", err)
			c.policyEvent(id, "Warning", ReasonFailed, fmt.Sprintf("matching the trigger %s %s/%s: %v", tr.req.Kind.Kind, tr.req.Namespace, tr.req.Name, err))
			continue
		}
		if !ok {
			continue
		}
		if err := c.createRequest(ctx, id, tr.req); err != nil {
			c.metrics.triggers.WithLabelValues(outcomeFailed).Inc()
			c.log.Error("cannot record a background request; this trigger is lost", "policy", id.String(), "kind", tr.req.Kind.Kind, "namespace", tr.req.Namespace, "name", tr.req.Name, "error", err)
			continue
		}
		c.metrics.triggers.WithLabelValues(outcomeRecorded).Inc()
	}
}

// createRequest creates the BackgroundRequest of a policy and its trigger.
func (c *Controller) createRequest(ctx context.Context, id engine.ID, req *engine.Request) error {
	spec, err := requestSpec(id, req)
	if err != nil {
		return err
	}
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": crds.BackgroundRequestResource.GroupVersion().String(),
		"kind":       crds.BackgroundRequest.Kind,
		"metadata": map[string]any{
			"generateName": "bg-",
			"namespace":    c.opts.Namespace,
			"labels":       map[string]any{PolicyLabel: labelValue(id.Name), crds.ManagedByLabel: crds.ManagedByValue},
		},
		"spec": spec,
	}}
	_, err = c.opts.Client.Resource(crds.BackgroundRequestResource).Namespace(c.opts.Namespace).Create(ctx, obj, metav1.CreateOptions{})
	return err
}

// requestSpec is the spec of a BackgroundRequest: the policy's ID and the trigger, in
// their JSON forms (engine.ID's tags, engine.Request's MarshalJSON).
func requestSpec(id engine.ID, req *engine.Request) (map[string]any, error) {
	data, err := json.Marshal(struct {
		Policy  engine.ID       `json:"policy"`
		Trigger *engine.Request `json:"trigger"`
	}{id, req})
	if err != nil {
		return nil, fmt.Errorf("encoding the trigger: %w", err)
	}
	var spec map[string]any
	if err := json.Unmarshal(data, &spec); err != nil {
		return nil, fmt.Errorf("encoding the trigger: %w", err)
	}
	return spec, nil
}

// decodeRequest reads the policy and trigger of a BackgroundRequest.
func decodeRequest(u *unstructured.Unstructured) (engine.ID, *engine.Request, error) {
	spec, _, _ := unstructured.NestedMap(u.Object, "spec")
	data, err := json.Marshal(spec)
	if err != nil {
		return engine.ID{}, nil, err
	}
	var out struct {
		Policy  engine.ID       `json:"policy"`
		Trigger *engine.Request `json:"trigger"`
	}
	if err := json.Unmarshal(data, &out); err != nil {
		return engine.ID{}, nil, fmt.Errorf("BackgroundRequest %s: spec: %w", u.GetName(), err)
	}
	if out.Trigger == nil {
		return engine.ID{}, nil, fmt.Errorf("BackgroundRequest %s: spec.trigger is missing", u.GetName())
	}
	return out.Policy, out.Trigger, nil
}

func labelValue(s string) string {
	if len(s) > 63 {
		s = s[:63]
	}
	return strings.TrimRight(s, "-_.")
}

// watchRequests watches the BackgroundRequests of morph's namespace and queues each:
// the ones a former leader left behind first (the informer's first list).
func (t *term) watchRequests(ctx context.Context, wg *sync.WaitGroup) error {
	c := t.c
	inf := dynamicinformer.NewFilteredDynamicInformer(c.opts.Client, crds.BackgroundRequestResource, c.opts.Namespace, 0, cache.Indexers{}, nil).Informer()
	enqueue := func(obj any) {
		if u, ok := obj.(*unstructured.Unstructured); ok && u.GetDeletionTimestamp() == nil {
			t.queue.Add(item{kind: kindRequest, request: u.GetName()})
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: enqueue}); err != nil {
		return fmt.Errorf("watching BackgroundRequests: %w", err)
	}
	t.requests = inf
	wg.Go(func() { inf.Run(ctx.Done()) })
	return nil
}

// request expands a BackgroundRequest into the targets its trigger names for its
// policy (request.Triggered), once per term, and queues them. A request whose policy
// is gone, or that names no target, is deleted at once.
func (t *term) request(ctx context.Context, it item) error {
	obj, ok, err := t.requests.GetStore().GetByKey(t.c.opts.Namespace + "/" + it.request)
	if err != nil || !ok {
		return err // deleted meanwhile
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil
	}
	t.mu.Lock()
	if _, started := t.pending[it.request]; started {
		t.mu.Unlock()
		return nil
	}
	t.mu.Unlock()
	id, trigger, err := decodeRequest(u)
	if err != nil {
		t.c.log.Error("deleting a BackgroundRequest morph cannot read", "request", it.request, "error", err)
		t.c.deleteRequest(ctx, it.request, &pendingRequest{uid: string(u.GetUID())})
		return nil
	}
	ps := t.c.policies.Load()
	p, ok := request.Policies{}, false
	if ps != nil {
		p, ok = ps.only(id)
	}
	if !ok {
		// The replica that admitted the trigger may have loaded the policy before this
		// one did: wait for it, through the queue's retries (giveUp deletes it).
		return fmt.Errorf("%w: %s", errUnknownPolicy, id)
	}
	works, err := request.Triggered(ctx, p, trigger, t.c.objs)
	if err != nil {
		return err
	}
	pr := &pendingRequest{uid: string(u.GetUID()), left: len(works), started: true}
	t.mu.Lock()
	t.pending[it.request] = pr
	t.mu.Unlock()
	t.c.log.Debug("processing a BackgroundRequest", "request", it.request, "policy", id.String(), "targets", len(works))
	if len(works) == 0 {
		t.mu.Lock()
		delete(t.pending, it.request)
		t.mu.Unlock()
		t.c.deleteRequest(ctx, it.request, pr)
		return nil
	}
	t.queueTargets(works, it.request, "")
	// Every target named twice is counted once: when all were, nothing is left to do.
	t.mu.Lock()
	done := t.pending[it.request] == pr && pr.left <= 0
	if done {
		delete(t.pending, it.request)
	}
	t.mu.Unlock()
	if done {
		t.c.deleteRequest(ctx, it.request, pr)
	}
	return nil
}

// errUnknownPolicy is the error of a BackgroundRequest whose policy the leader does not
// serve (yet, or any more) as a policy that mutates existing objects.
var errUnknownPolicy = errors.New("no loaded policy of that ID mutates existing objects")

// deleteRequest deletes a finished BackgroundRequest (the one of uid, not a
// successor of the same name).
func (c *Controller) deleteRequest(ctx context.Context, name string, p *pendingRequest) {
	opts := metav1.DeleteOptions{}
	if p.uid != "" {
		uid := types.UID(p.uid)
		opts.Preconditions = &metav1.Preconditions{UID: &uid}
	}
	err := c.opts.Client.Resource(crds.BackgroundRequestResource).Namespace(c.opts.Namespace).Delete(ctx, name, opts)
	if err != nil && !apierrors.IsNotFound(err) {
		c.log.Error("cannot delete a finished BackgroundRequest; the next leader processes it again", "request", name, "error", err)
		return
	}
	c.metrics.requests.WithLabelValues(requestOutcome(p)).Inc()
}

func requestOutcome(p *pendingRequest) string {
	if p.failed > 0 {
		return outcomeFailed
	}
	return "done"
}
