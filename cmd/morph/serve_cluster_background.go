package main

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"

	"github.com/morph-dev/morph/internal/cluster/background"
	"github.com/morph-dev/morph/internal/cluster/policies"
	"github.com/morph-dev/morph/internal/engine"
	"github.com/morph-dev/morph/internal/request"
	"github.com/morph-dev/morph/internal/webhook"
)

// setupBackground builds the background controller of cluster mode (docs/cluster.md,
// "Mutating existing objects"): every replica records the triggers of the requests it
// admits (serverOpts.Admitted) and follows the policies it loads (serverOpts.Loaded);
// the leader runs the controller. src is nil with --policies (a folder): policies then
// have no object to report on. The returned function stops the Events.
func (o *serveOptions) setupBackground(ctx context.Context, cfg *rest.Config, kube kubernetes.Interface, w *clusterWebhooks, src *policies.Source, namespaces request.NamespaceLookup, serverOpts *webhook.Options, log *slog.Logger) (stop func(), err error) {
	// The background writes have their own client, with a rate above client-go's
	// default of 5 requests a second: a scan reads and writes every target.
	bgCfg := rest.CopyConfig(cfg)
	bgCfg.QPS, bgCfg.Burst = backgroundQPS, 2*backgroundQPS
	dyn, err := dynamic.NewForConfig(bgCfg)
	if err != nil {
		return nil, fmt.Errorf("cluster mode: %w", err)
	}
	broadcaster := record.NewBroadcaster()
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kube.CoreV1().Events("")})
	opts := background.Options{
		Client:     dyn,
		Namespace:  o.cluster.namespace,
		Recorder:   broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: policies.Component}),
		Namespaces: namespaces,
		Self:       selfUser(ctx, kube, log),
		Access:     accessReviewer{kube},
		Logger:     log.With("component", "background"),
	}
	if src != nil {
		opts.Policies = sourcePolicies{src}
	}
	ctrl, err := background.New(opts)
	if err != nil {
		broadcaster.Shutdown()
		return nil, err
	}
	w.collectors = append(w.collectors, ctrl.Collectors()...)
	w.background = append(w.background, ctrl.RecordTriggers)
	w.Elector.Add("background", ctrl)
	loaded := serverOpts.Loaded
	serverOpts.Loaded = func(s *webhook.Snapshot) {
		if loaded != nil {
			loaded(s)
		}
		ctrl.Loaded(s)
	}
	serverOpts.Admitted = ctrl.Admitted
	return broadcaster.Shutdown, nil
}

// backgroundQPS is the request rate of the background controller's client.
const backgroundQPS = 50

// selfUser is the user morph acts as (a SelfSubjectReview): the background controller
// ignores the requests of its own writes. Empty when the API server does not say.
func selfUser(ctx context.Context, kube kubernetes.Interface, log *slog.Logger) string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	r, err := kube.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		log.Warn("cannot tell which user morph is (SelfSubjectReview); its own background writes may trigger policies again", "error", err)
		return ""
	}
	log.Info("background writes are made as", "user", r.Status.UserInfo.Username)
	return r.Status.UserInfo.Username
}

// sourcePolicies finds the cluster object of a compiled policy among the policy
// source's outcomes: same kind and name, and same namespace when the ID names one.
type sourcePolicies struct{ src *policies.Source }

func (s sourcePolicies) Object(id engine.ID) (*corev1.ObjectReference, string, bool) {
	for _, o := range s.src.Outcomes() {
		r := o.Ref
		if r.Kind.Kind != id.Kind || r.Name != id.Name || (id.Namespace != "" && r.Namespace != id.Namespace) {
			continue
		}
		ref := &corev1.ObjectReference{
			APIVersion: r.Kind.Group + "/" + r.Version,
			Kind:       r.Kind.Kind,
			Namespace:  r.Namespace,
			Name:       r.Name,
			UID:        r.UID,
		}
		return ref, string(r.UID) + "/" + strconv.FormatInt(o.Generation, 10), true
	}
	return nil, "", false
}

// accessReviewer asks the API server whether morph may do a verb on a resource (a
// SelfSubjectAccessReview, across all namespaces).
type accessReviewer struct{ kube kubernetes.Interface }

func (a accessReviewer) Allowed(ctx context.Context, verb string, resource schema.GroupVersionResource, subresource string) (bool, error) {
	r, err := a.kube.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
		Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
			Verb: verb, Group: resource.Group, Version: resource.Version, Resource: resource.Resource, Subresource: subresource,
		}},
	}, metav1.CreateOptions{})
	if err != nil {
		return false, err
	}
	return r.Status.Allowed, nil
}
