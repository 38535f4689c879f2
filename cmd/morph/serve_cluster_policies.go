package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	"k8s.io/apiserver/pkg/admission/plugin/policy/mutating/patch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/morph-dev/morph/internal/cluster/globalcontext"
	"github.com/morph-dev/morph/internal/cluster/leader"
	"github.com/morph-dev/morph/internal/cluster/policies"
	"github.com/morph-dev/morph/internal/engine"
	"github.com/morph-dev/morph/internal/objects"
	"github.com/morph-dev/morph/internal/policy"
	"github.com/morph-dev/morph/internal/webhook"
)

// clusterReloadInterval is how often morph serve checks, in cluster mode, whether the
// informers saw a change: an atomic read, so a change compiles within a quarter second.
const clusterReloadInterval = 250 * time.Millisecond

// clusterMode reports whether morph serve reads its policies from the API server:
// --kubeconfig, or no --policies inside a Pod.
func (o *serveOptions) clusterMode() bool {
	if o.cluster.kubeconfig != "" {
		return true
	}
	return o.policies == "" && os.Getenv("KUBERNETES_SERVICE_HOST") != ""
}

// runCluster is morph serve in cluster mode: the webhook server with the webhooks,
// certificates and leader election of cluster mode (setupClusterWebhooks), serving the
// policies of the API server (informers, with each policy's status written by the
// leader) or, with --policies, those of a folder.
func (o *serveOptions) runCluster(ctx context.Context, newLoader func(*objects.Store) *policy.Loader, log *slog.Logger, maxBody int64) error {
	// client-go (leader election, informers) logs through klog: send it to morph's log,
	// in morph's format.
	klog.SetSlogLogger(log.With("source", "client-go"))
	cfg, err := o.cluster.restConfig()
	if err != nil {
		return err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("cluster mode: %w", err)
	}
	apiext, err := apiextensionsclient.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("cluster mode: %w", err)
	}
	w, err := o.setupClusterWebhooks(kube, apiext, log)
	if err != nil {
		return err
	}
	serverOpts := webhook.Options{
		Admission:      o.admission,
		Conversion:     o.conversion,
		MaxBody:        maxBody,
		RequestTimeout: o.requestTimeout,
		Logger:         log,
		Loaded:         w.Policies.Loaded,
	}
	reload := o.reloadInterval
	if o.policies != "" {
		serverOpts.Source = &webhook.FolderSource{Policies: o.policies, Context: o.contexts, NewLoader: newLoader, Reader: o.reader}
		stopBackground, err := o.setupBackground(ctx, cfg, kube, w, nil, nil, &serverOpts, log)
		if err != nil {
			return err
		}
		defer stopBackground()
		server, err := webhook.New(serverOpts)
		if err != nil {
			return err
		}
		return w.serve(ctx, server, o.addr, webhook.ServeOptions{HTTP2: o.http2, ReloadInterval: reload, ShutdownGrace: o.shutdownGrace})
	}
	if o.cluster.newLoader == nil {
		return errors.New("morph serve: cluster mode is not wired in this build")
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("cluster mode: %w", err)
	}
	// GlobalContextEntries and what they cache come from the API server too.
	gctx := globalcontext.New(dyn, kube.Discovery().RESTClient())
	gctx.Logger = log.With("component", "globalcontext")
	gctx.Start(ctx)
	// Schemas of kinds morph has none of come from the API server's OpenAPI, as the
	// API server's own mutating admission finds them.
	types := patch.NewTypeConverterManager(nil, kube.Discovery().OpenAPIV3())
	go types.Run(ctx)
	readers := newClusterReaders(gctx, types)
	// apiCall entries are polled in the background (from their first read), each
	// outcome recorded for the entry's status; a changed or deleted entry's poller stops.
	readers.apiCalls.Poll(ctx, gctx.APICallRefreshed)
	gctx.OnChange(readers.apiCalls.Forget)
	var src *policies.Source
	src, err = policies.New(policies.Options{
		Client: dyn,
		// The dialects read cluster objects through the source's informers.
		NewLoader: func(store *objects.Store) *policy.Loader {
			r := readers
			r.resources = src
			return o.cluster.newLoader(store, r)
		},
		Logger: log.With("component", "policies"),
	})
	if err != nil {
		return err
	}
	events := policies.NewEvents(kube, src, log)
	defer events.Stop()
	serverOpts.Source, serverOpts.Namespaces = src, src.Namespaces()
	serverOpts.Mutated = func(ctx context.Context, req *engine.Request, res *engine.Result) {
		// The events the policies reported (a Katalog entry's "defaults applied").
		for _, n := range res.Notes {
			if n.Kind == engine.NoteEvent {
				events.Admission(ctx, req, n.Reason, n.Message)
			}
		}
	}
	stopBackground, err := o.setupBackground(ctx, cfg, kube, w, src, src.Namespaces(), &serverOpts, log)
	if err != nil {
		return err
	}
	defer stopBackground()
	server, err := webhook.New(serverOpts)
	if err != nil {
		return err
	}
	if err := src.RegisterMetrics(server.Registerer()); err != nil {
		return err
	}
	log.Info("reading policies from the API server", "host", cfg.Host)
	if err := src.Start(ctx); err != nil {
		return fmt.Errorf("morph serve: %w", err)
	}
	writer := &policies.StatusWriter{Source: src, Client: dyn, Events: events, Logger: log.With("component", "status")}
	w.Elector.Add("policy-status", leader.RunnableFunc(func(ctx context.Context) error { writer.Run(ctx); return nil }))
	// Warning Events on failing GlobalContextEntries (Kyverno's), from the leader.
	gevents := record.NewBroadcaster()
	gevents.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kube.CoreV1().Events("")})
	defer gevents.Shutdown()
	gstatus := &globalcontext.StatusWriter{
		Source: gctx,
		Events: gevents.NewRecorder(scheme.Scheme, corev1.EventSource{Component: policies.Component}),
		Logger: log.With("component", "globalcontext-status"),
	}
	w.Elector.Add("globalcontext-status", leader.RunnableFunc(func(ctx context.Context) error { gstatus.Run(ctx); return nil }))
	if reload == webhook.DefaultReloadInterval {
		reload = clusterReloadInterval
	}
	return w.serve(ctx, server, o.addr, webhook.ServeOptions{HTTP2: o.http2, ReloadInterval: reload, ShutdownGrace: o.shutdownGrace})
}
