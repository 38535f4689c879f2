package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/morph-dev/morph/internal/cluster/policies"
	"github.com/morph-dev/morph/internal/engine"
	"github.com/morph-dev/morph/internal/objects"
	"github.com/morph-dev/morph/internal/policy"
	"github.com/morph-dev/morph/internal/webhook"
)

// clusterReloadInterval is how often morph serve checks, in cluster mode, whether the
// informers saw a change: an atomic read, so a change compiles within a quarter second.
const clusterReloadInterval = 250 * time.Millisecond

// clusterOptions are the flags of morph serve in cluster mode that concern policies.
type clusterOptions struct {
	kubeconfig  string
	leaderElect bool
	// newLoader builds the dialects with a reader of cluster objects (resource.Get).
	newLoader func(*objects.Store, resourceReader) *policy.Loader
}

func (c *clusterOptions) addFlags(f *pflag.FlagSet) {
	f.StringVar(&c.kubeconfig, "kubeconfig", "", "serve the policies of the cluster this kubeconfig names (in a Pod without --policies: the in-cluster config)")
	f.BoolVar(&c.leaderElect, "leader-elect", true, "in cluster mode, run the writers (policy status, Events on policies) only on the elected leader; false runs them in this replica (one replica only)")
}

// clusterMode reports whether morph serve reads its policies from the API server:
// --kubeconfig, or no --policies inside a Pod.
func (o *serveOptions) clusterMode() bool {
	if o.cluster.kubeconfig != "" {
		return true
	}
	return o.policies == "" && os.Getenv("KUBERNETES_SERVICE_HOST") != ""
}

func (c *clusterOptions) restConfig() (*rest.Config, error) {
	if c.kubeconfig == "" {
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("in-cluster config: %w", err)
		}
		return cfg, nil
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", c.kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("--kubeconfig %s: %w", c.kubeconfig, err)
	}
	return cfg, nil
}

// runCluster serves the cluster's policies: informers feed the webhook server, and the
// status writer (leader only) reports each policy's outcome.
func (o *serveOptions) runCluster(ctx context.Context, certs *webhook.Certificates, maxBody int64, log *slog.Logger) error {
	if o.cluster.newLoader == nil {
		return errors.New("morph serve: cluster mode is not wired in this build")
	}
	if o.cluster.leaderElect {
		return usagef("--leader-elect: leader election is not part of this build yet; give --leader-elect=false and run one replica")
	}
	cfg, err := o.cluster.restConfig()
	if err != nil {
		return err
	}
	cfg.UserAgent = "morph"
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("API client: %w", err)
	}
	clientset, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("API client: %w", err)
	}
	var src *policies.Source
	src, err = policies.New(policies.Options{
		Client: dyn,
		// The dialects read cluster objects through the source's informers.
		NewLoader: func(store *objects.Store) *policy.Loader { return o.cluster.newLoader(store, src) },
		Logger:    log.With("component", "policies"),
	})
	if err != nil {
		return err
	}
	events := policies.NewEvents(clientset, src, log)
	defer events.Stop()
	server, err := webhook.New(webhook.Options{
		Source:         src,
		Namespaces:     src.Namespaces(),
		Admission:      o.admission,
		Conversion:     o.conversion,
		MaxBody:        maxBody,
		RequestTimeout: o.requestTimeout,
		Logger:         log,
		Mutated: func(ctx context.Context, req *engine.Request, res *engine.Result) {
			// The events the policies reported (a Katalog entry's "defaults applied").
			for _, n := range res.Notes {
				if n.Kind == engine.NoteEvent {
					events.Admission(ctx, req, n.Reason, n.Message)
				}
			}
		},
	})
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
	var wg sync.WaitGroup
	defer wg.Wait()
	writersCtx, stopWriters := context.WithCancel(ctx)
	defer stopWriters()
	if err := o.runLeaderWork(writersCtx, &wg, log, writer.Run); err != nil {
		return err
	}
	reload := o.reloadInterval
	if reload == webhook.DefaultReloadInterval {
		reload = clusterReloadInterval
	}
	err = server.ListenAndServe(ctx, o.addr, webhook.ServeOptions{
		TLS:            server.TLSConfig(certs),
		HTTP2:          o.http2,
		ReloadInterval: reload,
		ShutdownGrace:  o.shutdownGrace,
	})
	if err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("morph serve: %w", err)
	}
	return nil
}

// runLeaderWork starts the work only one replica may do (each returns when its context
// ends). With --leader-elect=false it runs here, for a single replica. Leader election
// proper (a Lease in --namespace) starts the same functions from its
// OnStartedLeading callback with the leader's context, and that context's end stops them.
func (o *serveOptions) runLeaderWork(ctx context.Context, wg *sync.WaitGroup, log *slog.Logger, work ...func(context.Context)) error {
	log.Info("leader election off: this replica writes policy status and Events")
	for _, w := range work {
		wg.Go(func() { w(ctx) })
	}
	return nil
}
