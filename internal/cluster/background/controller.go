package background

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"github.com/morph-dev/morph/internal/engine"
	"github.com/morph-dev/morph/internal/request"
	"github.com/morph-dev/morph/internal/webhook"
)

// Defaults of Options.
const (
	DefaultWorkers = 4
	// DefaultConflictRetries is how often a write that met a conflict is read,
	// evaluated and written again at once, before the item goes back to the queue.
	DefaultConflictRetries = 5
	// DefaultMaxRequeues bounds how often an item goes back to the rate-limited queue
	// (after an error, or after DefaultConflictRetries conflicts in a row) before it is
	// given up, with a Warning Event on the policy.
	DefaultMaxRequeues = 8
)

// PolicyObjects finds the cluster object a compiled policy came from.
type PolicyObjects interface {
	// Object returns the policy object's reference, for Events, and a version that
	// changes whenever the policy does (its uid and generation); ok is false when the
	// policy comes from no cluster object (a folder).
	Object(id engine.ID) (ref *corev1.ObjectReference, version string, ok bool)
}

// Options configure a Controller.
type Options struct {
	// Client reads and writes the targets and the BackgroundRequests. Required.
	Client dynamic.Interface
	// Namespace is morph's namespace, where the BackgroundRequests live. Required.
	Namespace string
	// Objects lists and reads the objects the policies select (the API server through
	// Client when nil).
	Objects request.Objects
	// Recorder emits the Events: failures on the policy, reconcile events on the
	// object. Events are not emitted when nil.
	Recorder record.EventRecorder
	// Namespaces finds the Namespace objects a reconciled object's policies see (the
	// policy source's informer cache).
	Namespaces request.NamespaceLookup
	// Policies finds the object of a policy (for Events and to tell a changed policy);
	// without it every policy counts as unchanged once scanned.
	Policies PolicyObjects
	// Access reviews morph's permissions on the resources of a policy scanned or
	// reconciled (not reviewed when nil).
	Access AccessReviewer
	// Self is the user name morph writes as: requests it made do not trigger the
	// policies that skip background requests (Kyverno's skipBackgroundRequests, true by
	// default), whose own writes would otherwise trigger them again. Empty: every
	// request may trigger.
	Self string
	// Logger receives the controller's logs (discarded when nil).
	Logger *slog.Logger
	// Workers, ConflictRetries, MaxRequeues (the defaults when 0).
	Workers, ConflictRetries, MaxRequeues int
}

// defaultRateLimiter paces requeued items: per item exponentially from 250ms (so that
// the DefaultMaxRequeues attempts span about a minute, enough for an API server to come
// back), at most 5 minutes, and 10 a second overall with bursts of 100, as client-go's
// default controller limiter.
func defaultRateLimiter() workqueue.TypedRateLimiter[item] {
	return workqueue.NewTypedMaxOfRateLimiter(
		workqueue.NewTypedItemExponentialFailureRateLimiter[item](250*time.Millisecond, 5*time.Minute),
		&workqueue.TypedBucketRateLimiter[item]{Limiter: rate.NewLimiter(rate.Limit(10), 100)},
	)
}

// Controller is the background controller. Every replica feeds it its policies
// (Loaded) and its admitted requests (Admitted); the leader runs it (Run).
type Controller struct {
	opts    Options
	log     *slog.Logger
	objs    request.Objects
	metrics *metrics

	// policies is the current policy set, replaced by Loaded.
	policies atomic.Pointer[policySet]
	// changed receives a value (coalesced) when Loaded replaced the policies.
	changed chan struct{}
	// triggers carries admitted requests from Admitted to the recorder.
	triggers chan trigger
}

// trigger is one admitted request waiting to be recorded.
type trigger struct {
	req   *engine.Request
	group string
}

// triggerBuffer bounds the admitted requests waiting to be recorded as
// BackgroundRequests; beyond it a trigger is dropped, logged and counted.
const triggerBuffer = 4096

// New checks opts and returns a Controller.
func New(opts Options) (*Controller, error) {
	if opts.Client == nil || opts.Namespace == "" {
		return nil, errors.New("the background controller needs a client and morph's namespace")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Workers <= 0 {
		opts.Workers = DefaultWorkers
	}
	if opts.ConflictRetries <= 0 {
		opts.ConflictRetries = DefaultConflictRetries
	}
	if opts.MaxRequeues <= 0 {
		opts.MaxRequeues = DefaultMaxRequeues
	}
	c := &Controller{
		opts:     opts,
		log:      opts.Logger,
		objs:     opts.Objects,
		metrics:  newMetrics(),
		changed:  make(chan struct{}, 1),
		triggers: make(chan trigger, triggerBuffer),
	}
	if c.objs == nil {
		c.objs = LiveObjects{Client: opts.Client}
	}
	return c, nil
}

// Collectors are the controller's metrics, for the webhook server's registry.
func (c *Controller) Collectors() []prometheus.Collector { return c.metrics.collectors() }

// policySet is one load of the policies, as the controller uses it.
type policySet struct {
	// all runs every mutator and validator (also those off at admission): what the
	// background and reconcile evaluations see.
	all request.Policies
	// byID holds the mutators by ID.
	byID map[engine.ID]engine.Mutator
	// background lists the policies that mutate existing objects, in the engine's order.
	background []engine.ID
	// reconciled lists the resources of the policies whose objects are reconciled, once
	// each, with the kinds they hold; reconcilers the policies of each.
	reconciled  []reconciledResource
	reconcilers map[schema.GroupVersionResource][]engine.ID
}

type reconciledResource struct {
	resource schema.GroupVersionResource
	kind     schema.GroupVersionKind
}

// Loaded takes the policies of a snapshot the webhook server switched to (for
// webhook.Options.Loaded). It builds the policy set on the loading goroutine and only
// signals the leader, so it does not block.
func (c *Controller) Loaded(snap *webhook.Snapshot) {
	ps, err := newPolicySet(snap, c.opts.Self)
	if err != nil {
		c.log.Error("background policies not updated", "error", err)
		return
	}
	c.policies.Store(ps)
	select {
	case c.changed <- struct{}{}:
	default:
	}
}

func newPolicySet(snap *webhook.Snapshot, self string) (*policySet, error) {
	b := snap.Bundle
	set, err := engine.NewSet(b.Mutators, b.Finalizers...)
	if err != nil {
		return nil, fmt.Errorf("building the background policy set: %w", err)
	}
	ps := &policySet{
		all:         request.Policies{Set: set, Validators: engine.NewValidators(b.Validators), BackgroundUser: self},
		byID:        map[engine.ID]engine.Mutator{},
		reconcilers: map[schema.GroupVersionResource][]engine.ID{},
	}
	seen := map[schema.GroupVersionResource]bool{}
	for _, m := range set.Mutators() {
		ps.byID[m.ID] = m
		if m.Background != nil {
			ps.background = append(ps.background, m.ID)
		}
		if !m.Reconciled {
			continue
		}
		for i, r := range m.Resources {
			if i >= len(m.Targets) {
				continue
			}
			ps.reconcilers[r] = append(ps.reconcilers[r], m.ID)
			if seen[r] {
				continue
			}
			seen[r] = true
			t := m.Targets[i]
			ps.reconciled = append(ps.reconciled, reconciledResource{resource: r, kind: schema.GroupVersionKind{Group: t.Group, Version: t.Version, Kind: t.Kind}})
		}
	}
	return ps, nil
}

// only is the policy set restricted to one policy, for request.Triggered.
func (ps *policySet) only(id engine.ID) (request.Policies, bool) {
	m, ok := ps.byID[id]
	if !ok || m.Background == nil {
		return request.Policies{}, false
	}
	set, err := engine.NewSet([]engine.Mutator{m})
	if err != nil {
		return request.Policies{}, false
	}
	return request.Policies{Set: set, BackgroundUser: ps.all.BackgroundUser}, true
}

// Run is the leader's part (a leader.Runnable): until ctx ends (the lease is lost or
// morph stops) it processes the BackgroundRequests, scans every policy that mutates
// existing objects (all of them at the start of a term, then each new or changed one),
// and reconciles the objects of the reconciled policies. It returns when ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	limiter := defaultRateLimiter()
	t := &term{
		c:       c,
		queue:   workqueue.NewTypedRateLimitingQueueWithConfig(limiter, workqueue.TypedRateLimitingQueueConfig[item]{Name: "morph-background"}),
		works:   map[item]request.Work{},
		pending: map[string]*pendingRequest{},
		scanned: map[engine.ID]string{},
		watches: map[schema.GroupVersionResource]context.CancelFunc{},

		reconcilers:        map[schema.GroupVersionResource]cache.SharedIndexInformer{},
		reconciledVersions: map[schema.GroupVersionResource]string{},
	}
	c.log.Info("background controller started")
	defer c.log.Info("background controller stopped")
	var wg sync.WaitGroup
	defer wg.Wait()
	defer t.queue.ShutDown()
	if err := t.watchRequests(ctx, &wg); err != nil {
		return err
	}
	for range c.opts.Workers {
		wg.Go(func() {
			for t.next(ctx) {
			}
		})
	}
	// A new term scans every policy: the work a former leader left unfinished is done.
	t.policiesChanged(ctx, &wg)
	sample := time.NewTicker(5 * time.Second)
	defer sample.Stop()
	for {
		select {
		case <-ctx.Done():
			t.stopWatches()
			return nil
		case <-c.changed:
			t.policiesChanged(ctx, &wg)
		case <-sample.C:
			c.metrics.queueDepth.Set(float64(t.queue.Len()))
		}
	}
}

// item is one unit of work in the queue. Items are comparable: a target named twice by
// the same source is queued once.
type item struct {
	kind   itemKind
	policy engine.ID
	// request is the BackgroundRequest the item comes from (kindRequest, kindTarget of
	// a trigger); scan the scan it comes from (kindTarget of a scan).
	request string
	scan    string
	// target is the object to mutate (kindTarget) or reconcile (kindReconcile).
	target request.Target
}

type itemKind int

const (
	kindScan itemKind = iota
	kindRequest
	kindTarget
	kindReconcile
)

// pendingRequest counts the targets of a BackgroundRequest still to do.
type pendingRequest struct {
	uid     string
	left    int
	failed  int
	started bool
}

// term is the controller's state while this replica leads.
type term struct {
	c     *Controller
	queue workqueue.TypedRateLimitingInterface[item]

	mu sync.Mutex // guards the fields below
	// works holds the work of each queued target item.
	works map[item]request.Work
	// pending counts the targets left per BackgroundRequest.
	pending map[string]*pendingRequest
	// scanned is the version of each policy scanned in this term.
	scanned map[engine.ID]string
	// watches stop the informers of the reconciled resources.
	watches map[schema.GroupVersionResource]context.CancelFunc
	// reconcilers are the informers of the reconciled resources, reconciledVersions
	// the versions of their policies.
	reconcilers        map[schema.GroupVersionResource]cache.SharedIndexInformer
	reconciledVersions map[schema.GroupVersionResource]string

	// requests is the informer of the BackgroundRequests.
	requests cache.SharedIndexInformer
}

// policiesChanged queues the scan of every policy that mutates existing objects and is
// new or changed since it was last scanned in this term, and watches the objects of
// the reconciled policies.
func (t *term) policiesChanged(ctx context.Context, wg *sync.WaitGroup) {
	ps := t.c.policies.Load()
	if ps == nil {
		return
	}
	t.mu.Lock()
	for _, id := range ps.background {
		version := ""
		if t.c.opts.Policies != nil {
			_, version, _ = t.c.opts.Policies.Object(id)
		}
		if v, ok := t.scanned[id]; ok && v == version {
			continue
		}
		t.scanned[id] = version
		t.queue.Add(item{kind: kindScan, policy: id, scan: version})
	}
	t.mu.Unlock()
	t.watchReconciled(ctx, wg, ps)
}

// next processes one item; false once the queue shut down.
func (t *term) next(ctx context.Context) bool {
	it, shutdown := t.queue.Get()
	if shutdown {
		return false
	}
	defer t.queue.Done(it)
	if ctx.Err() != nil {
		return true
	}
	var err error
	switch it.kind {
	case kindScan:
		err = t.scan(ctx, it)
	case kindRequest:
		err = t.request(ctx, it)
	case kindTarget:
		err = t.target(ctx, it)
	case kindReconcile:
		err = t.reconcile(ctx, it)
	}
	if err == nil || ctx.Err() != nil {
		t.queue.Forget(it)
		return true
	}
	if t.queue.NumRequeues(it) < t.c.opts.MaxRequeues {
		t.c.log.Info("background work failed; trying again later", "work", it.String(), "error", err, "attempt", t.queue.NumRequeues(it)+1)
		t.queue.AddRateLimited(it)
		return true
	}
	t.queue.Forget(it)
	t.giveUp(ctx, it, err)
	return true
}

// giveUp reports an item that failed every attempt: a Warning Event on its policy, a
// metric, a log line; its BackgroundRequest counts it done.
func (t *term) giveUp(ctx context.Context, it item, err error) {
	t.c.metrics.work.WithLabelValues(it.source(), outcomeFailed).Inc()
	t.c.log.Error("background work failed; giving up", "work", it.String(), "error", err, "attempts", t.c.opts.MaxRequeues+1)
	t.c.policyEvent(it.policy, corev1.EventTypeWarning, ReasonFailed, fmt.Sprintf("%s: %v", it.describe(), err))
	if it.kind == kindTarget {
		t.targetDone(ctx, it, true)
	}
	if it.kind == kindRequest {
		if errors.Is(err, errUnknownPolicy) {
			t.c.log.Info("deleting a BackgroundRequest whose policy does not mutate existing objects", "request", it.request)
			t.c.deleteRequest(ctx, it.request, &pendingRequest{})
			return
		}
		t.c.log.Error("the BackgroundRequest stays for the next leader", "request", it.request)
	}
}

// String names an item in logs.
func (it item) String() string {
	switch it.kind {
	case kindScan:
		return "scan of " + it.policy.String()
	case kindRequest:
		return "BackgroundRequest " + it.request
	case kindReconcile:
		return "reconcile of " + it.target.String()
	}
	return it.policy.String() + " on " + it.target.String()
}

// describe words an item in an Event.
func (it item) describe() string {
	switch it.kind {
	case kindScan:
		return "listing the existing objects to mutate"
	case kindRequest:
		return "processing BackgroundRequest " + it.request
	}
	return "mutating " + it.target.String()
}

// source is the item's label in the metrics: what caused it.
func (it item) source() string {
	switch {
	case it.kind == kindReconcile:
		return sourceReconcile
	case it.kind == kindRequest || it.request != "":
		return sourceTrigger
	}
	return sourceScan
}

// scan lists the targets of a new or changed policy and queues them.
func (t *term) scan(ctx context.Context, it item) error {
	ps := t.c.policies.Load()
	if ps == nil || ps.byID[it.policy].Background == nil {
		return nil // the policy is gone, or no longer mutates existing objects
	}
	if t.queue.NumRequeues(it) == 0 {
		t.c.checkAccess(ctx, []engine.ID{it.policy}, targetAccess(ps.byID[it.policy].Background.TargetResources))
	}
	start := time.Now()
	works, err := request.Scan(ctx, ps.all, it.policy, t.c.objs)
	t.c.metrics.scans.Observe(time.Since(start).Seconds())
	if err != nil {
		return err
	}
	t.c.log.Info("scanning existing objects", "policy", it.policy.String(), "targets", len(works))
	t.queueTargets(works, "", it.scan)
	return nil
}

// queueTargets queues the target item of each work.
func (t *term) queueTargets(works []request.Work, requestName, scan string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, w := range works {
		ti := item{kind: kindTarget, policy: w.Policy, request: requestName, scan: scan, target: w.Target}
		if _, queued := t.works[ti]; queued {
			if requestName != "" {
				t.pending[requestName].left-- // named twice: counted once
			}
			continue
		}
		t.works[ti] = w
		t.queue.Add(ti)
	}
}

// targetDone forgets a finished target item and, when it was the last of its
// BackgroundRequest, deletes the request.
func (t *term) targetDone(ctx context.Context, it item, failed bool) {
	t.mu.Lock()
	delete(t.works, it)
	var done *pendingRequest
	if p := t.pending[it.request]; it.request != "" && p != nil {
		p.left--
		if failed {
			p.failed++
		}
		if p.left <= 0 {
			done = p
			delete(t.pending, it.request)
		}
	}
	t.mu.Unlock()
	if done != nil {
		t.c.deleteRequest(ctx, it.request, done)
	}
}

// sortedResources returns the keys of m, sorted, for stable logs.
func sortedResources[V any](m map[schema.GroupVersionResource]V) []schema.GroupVersionResource {
	out := make([]schema.GroupVersionResource, 0, len(m))
	for r := range m {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b schema.GroupVersionResource) int {
		if a.String() < b.String() {
			return -1
		}
		if a.String() > b.String() {
			return 1
		}
		return 0
	})
	return out
}
