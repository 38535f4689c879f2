package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/morph-dev/morph/internal/cluster/certs"
	"github.com/morph-dev/morph/internal/cluster/leader"
	"github.com/morph-dev/morph/internal/cluster/registration"
	"github.com/morph-dev/morph/internal/objects"
	"github.com/morph-dev/morph/internal/policy"
	"github.com/morph-dev/morph/internal/webhook"
)

// Where a Pod finds its namespace.
const serviceAccountNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// clusterOptions are the cluster-mode flags of morph serve (docs/cluster.md): where the
// cluster is, morph's own namespace, how the API server reaches morph, certificates and
// leader election.
type clusterOptions struct {
	kubeconfig    string
	namespace     string
	webhookURL    string
	serviceName   string
	caFile        string
	certValidity  time.Duration
	leaderElect   bool
	leaseDuration time.Duration
	renewDeadline time.Duration
	retryPeriod   time.Duration
	// failurePolicy and excludeNamespaces override every registered webhook.
	failurePolicy     string
	excludeNamespaces []string
	// newLoader builds the dialects with readers of cluster objects (resource.Get,
	// globalContext.Get).
	newLoader func(*objects.Store, clusterReaders) *policy.Loader
}

func (c *clusterOptions) addFlags(f *pflag.FlagSet) {
	f.StringVar(&c.kubeconfig, "kubeconfig", "", "cluster mode: the kubeconfig of the cluster to run in (policies from its API server unless --policies is given; webhooks registered, certificates kept, a leader elected); in a Pod without --policies the in-cluster config is used")
	f.StringVar(&c.namespace, "namespace", "", "morph's own namespace: its Secret and Lease live there, and admission skips it (default: the Pod's, else morph-system)")
	f.StringVar(&c.webhookURL, "webhook-url", "", "cluster mode: register this base URL (https://HOST:PORT) instead of the Service --service-name")
	f.StringVar(&c.serviceName, "service-name", "morph", "cluster mode: the Service in --namespace, port 443, in front of morph")
	f.StringVar(&c.caFile, "ca-file", "", "cluster mode with --cert-dir or --tls-cert: the caBundle to register (default: ca.crt of --cert-dir when present, else none)")
	f.DurationVar(&c.certValidity, "cert-validity", webhook.ServingValidity, "cluster mode: validity of the serving certificates morph generates (renewed at two thirds)")
	f.BoolVar(&c.leaderElect, "leader-elect", true, "cluster mode: run the writers only on the replica holding Lease morph in --namespace")
	f.DurationVar(&c.leaseDuration, "leader-election-lease-duration", leader.DefaultLeaseDuration, "how long a leader's Lease lasts without renewal")
	f.DurationVar(&c.renewDeadline, "leader-election-renew-deadline", leader.DefaultRenewDeadline, "how long the leader tries to renew before it stops leading")
	f.DurationVar(&c.retryPeriod, "leader-election-retry-period", leader.DefaultRetryPeriod, "how often replicas try to acquire or renew the Lease")
	f.StringVar(&c.failurePolicy, "webhook-failure-policy", "", "cluster mode: Fail or Ignore: the failurePolicy of every registered webhook, what the API server does when morph cannot be reached (default: each policy's own)")
	f.StringSliceVar(&c.excludeNamespaces, "exclude-namespace", nil, "cluster mode: a namespace admission skips, besides kube-system and --namespace (repeatable)")
}

// overrides are the registration's --webhook-failure-policy and --exclude-namespace.
func (c *clusterOptions) overrides() (registration.Overrides, error) {
	o := registration.Overrides{ExcludeNamespaces: c.excludeNamespaces}
	switch c.failurePolicy {
	case "":
	case string(admissionregistrationv1.Fail), string(admissionregistrationv1.Ignore):
		o.FailurePolicy = admissionregistrationv1.FailurePolicyType(c.failurePolicy)
	default:
		return o, usagef("--webhook-failure-policy %q: use Fail or Ignore (or leave it unset for each policy's own)", c.failurePolicy)
	}
	for _, ns := range c.excludeNamespaces {
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			return o, usagef("--exclude-namespace %q: %s", ns, strings.Join(errs, "; "))
		}
	}
	return o, nil
}

// resolveNamespace fills in --namespace: the Pod's namespace, else morph-system.
func (c *clusterOptions) resolveNamespace() error {
	if c.namespace == "" {
		if data, err := os.ReadFile(serviceAccountNamespaceFile); err == nil && len(bytes.TrimSpace(data)) > 0 {
			c.namespace = string(bytes.TrimSpace(data))
		} else {
			c.namespace = "morph-system"
		}
	}
	if errs := validation.IsDNS1123Label(c.namespace); len(errs) > 0 {
		return usagef("--namespace %q: %s", c.namespace, strings.Join(errs, "; "))
	}
	return nil
}

func (c *clusterOptions) restConfig() (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	if c.kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", c.kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("cluster mode: the API server's configuration: %w", err)
	}
	cfg.UserAgent = "morph"
	return cfg, nil
}

// configOptions say how the API server reaches this server.
func (c *clusterOptions) configOptions() (webhook.ConfigOptions, error) {
	o := webhook.ConfigOptions{Name: "morph", Namespace: c.namespace}
	if c.webhookURL != "" {
		o.URL = c.webhookURL
	} else {
		o.Service = &webhook.ServiceRef{Namespace: c.namespace, Name: c.serviceName, Port: 443}
	}
	// Configurations checks the rest; an empty bundle shows its errors now.
	if _, _, err := webhook.Configurations(&policy.Bundle{}, o); err != nil {
		return o, usagef("cluster mode: %s", strings.NewReplacer("--url", "--webhook-url", "--service", "--service-name").Replace(err.Error()))
	}
	return o, nil
}

// certificateHosts are the names of the serving certificates morph generates: the
// --webhook-url host, or the Service's names, and every --dns-name.
func (c *clusterOptions) certificateHosts(extra []string) ([]string, error) {
	var hosts []string
	if c.webhookURL != "" {
		u, err := url.Parse(c.webhookURL)
		if err != nil {
			return nil, usagef("--webhook-url: %v", err)
		}
		hosts = append(hosts, u.Hostname())
	} else {
		svc := c.serviceName + "." + c.namespace + ".svc"
		hosts = append(hosts, svc, svc+".cluster.local")
	}
	for _, h := range extra {
		if h != "" && !containsHost(hosts, h) {
			hosts = append(hosts, h)
		}
	}
	return hosts, nil
}

func containsHost(hosts []string, h string) bool {
	for _, x := range hosts {
		if x == h || (net.ParseIP(x) != nil && net.ParseIP(x).Equal(net.ParseIP(h))) {
			return true
		}
	}
	return false
}

// externalCABundle is the caBundle registered for certificates given from outside:
// --ca-file, else ca.crt of --cert-dir, else none.
func (o *serveOptions) externalCABundle() (registration.StaticCABundle, error) {
	path := o.cluster.caFile
	if path == "" && o.certDir != "" {
		if _, err := os.Stat(filepath.Join(o.certDir, webhook.CAFile)); err == nil {
			path = filepath.Join(o.certDir, webhook.CAFile)
		}
	}
	if path == "" {
		return nil, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cluster mode: reading the caBundle: %w", err)
	}
	if !bytes.Contains(data, []byte("-----BEGIN CERTIFICATE-----")) {
		return nil, fmt.Errorf("cluster mode: the caBundle %s holds no PEM certificate", path)
	}
	return data, nil
}

// clusterWebhooks is what cluster mode adds around the webhook server for webhooks,
// certificates and leader election: built by setupClusterWebhooks before the server,
// then serve runs the server with it. Leader-only work of other parts is added with
// Elector.Add before serve (or at any time).
type clusterWebhooks struct {
	Elector *leader.Elector
	// Policies.Loaded is the server's webhook.Options.Loaded hook.
	Policies   *registration.Policies
	tlsConfig  func(*webhook.Server) *tls.Config
	collectors []prometheus.Collector
	background []func(context.Context)
	log        *slog.Logger
}

// setupClusterWebhooks builds the elector and its writers (certificate Secret, webhook
// configurations, CRD caBundles) and the serving certificates: the Secret's, or the
// files given from outside.
func (o *serveOptions) setupClusterWebhooks(kube kubernetes.Interface, apiext apiextensionsclient.Interface, log *slog.Logger) (*clusterWebhooks, error) {
	c := &o.cluster
	if err := c.resolveNamespace(); err != nil {
		return nil, err
	}
	regOpts, err := c.configOptions()
	if err != nil {
		return nil, err
	}
	overrides, err := c.overrides()
	if err != nil {
		return nil, err
	}
	electorCfg := leader.Config{Namespace: c.namespace, LeaseDuration: c.leaseDuration, RenewDeadline: c.renewDeadline, RetryPeriod: c.retryPeriod, Logger: log}
	if c.leaderElect {
		electorCfg.Client = kube
	}
	elector, err := leader.New(electorCfg)
	if err != nil {
		return nil, usageError{err}
	}
	log.Info("cluster mode", "namespace", c.namespace, "identity", elector.Identity(), "leaderElection", c.leaderElect)
	w := &clusterWebhooks{Elector: elector, Policies: &registration.Policies{}, log: log}
	regMetrics := registration.NewMetrics()
	w.collectors = append(elector.Collectors(), regMetrics.Collectors()...)
	var caBundle registration.CABundle
	var caChanged, crdWake <-chan struct{}
	if o.certDir != "" || o.tlsCert != "" {
		certFile, keyFile, err := o.certificateFiles(log)
		if err != nil {
			return nil, err
		}
		files, err := webhook.LoadCertificates(certFile, keyFile)
		if err != nil {
			return nil, err
		}
		bundle, err := o.externalCABundle()
		if err != nil {
			return nil, err
		}
		if bundle == nil {
			log.Warn("certificates given from outside and no --ca-file: webhook configurations get no caBundle and CRD caBundles are not updated")
		}
		caBundle = bundle
		w.tlsConfig = func(s *webhook.Server) *tls.Config { return s.TLSConfig(files) }
	} else {
		hosts, err := c.certificateHosts(o.dnsNames)
		if err != nil {
			return nil, err
		}
		store := certs.NewStore(log)
		rotator := certs.NewRotator()
		rotator.Client, rotator.Namespace, rotator.Hosts, rotator.Validity, rotator.Store, rotator.Log = kube, c.namespace, hosts, c.certValidity, store, log
		elector.Add("certificates", rotator)
		w.collectors = append(w.collectors, store.Collectors()...)
		w.collectors = append(w.collectors, rotator.Collectors()...)
		caBundle, caChanged, crdWake = store, store.Changed(), store.Changed()
		w.tlsConfig = func(*webhook.Server) *tls.Config { return store.TLSConfig() }
		w.background = append(w.background, func(ctx context.Context) { store.Watch(ctx, kube, c.namespace) })
		log.Info("certificates kept in a Secret", "secret", c.namespace+"/"+certs.SecretName, "hosts", strings.Join(hosts, ","))
	}
	if o.admission {
		elector.Add("webhook-configurations", &registration.Configs{
			Client: kube, Options: regOpts, CA: caBundle, Policies: w.Policies, Wake: caChanged, Log: log, Metrics: regMetrics,
			Overrides: overrides,
		})
	}
	if o.conversion {
		elector.Add("crd-cabundles", &registration.CRDCABundles{
			Client: apiext, CA: caBundle, Policies: w.Policies, Wake: crdWake, Log: log, Metrics: regMetrics,
		})
	}
	return w, nil
}

// serve registers the metrics on server, starts the certificate informer and the
// election, and serves until ctx ends; the writers stop and the Lease is released
// after the server stopped.
func (w *clusterWebhooks) serve(ctx context.Context, server *webhook.Server, addr string, opts webhook.ServeOptions) error {
	for _, col := range w.collectors {
		if err := server.Registerer().Register(col); err != nil {
			return fmt.Errorf("cluster mode metrics: %w", err)
		}
	}
	var wg sync.WaitGroup
	bgCtx, stopBackground := context.WithCancel(ctx)
	for _, run := range w.background {
		wg.Go(func() { run(bgCtx) })
	}
	wg.Go(func() {
		if err := w.Elector.Run(bgCtx); err != nil {
			w.log.Error("leader election stopped", "error", err)
		}
	})
	defer func() { stopBackground(); wg.Wait() }()
	opts.TLS = w.tlsConfig(server)
	err := server.ListenAndServe(ctx, addr, opts)
	if err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("morph serve: %w", err)
	}
	return nil
}

// certificateFiles are the serving pair given from outside (see run), generated into
// --cert-dir when missing.
func (o *serveOptions) certificateFiles(log *slog.Logger) (certFile, keyFile string, err error) {
	if o.certDir == "" {
		return o.tlsCert, o.tlsKey, nil
	}
	hosts, err := webhook.CertificateHosts(o.addr, o.dnsNames)
	if err != nil {
		return "", "", usageError{err}
	}
	if o.cluster.webhookURL != "" {
		if u, err := url.Parse(o.cluster.webhookURL); err == nil && !containsHost(hosts, u.Hostname()) {
			hosts = append(hosts, u.Hostname())
		}
	}
	generated, err := webhook.EnsureCertificates(o.certDir, hosts, time.Now())
	if err != nil {
		return "", "", err
	}
	if generated {
		log.Info("generated a CA and a serving certificate", "caBundle", filepath.Join(o.certDir, webhook.CAFile), "hosts", strings.Join(hosts, ","))
	}
	return filepath.Join(o.certDir, webhook.CertFile), filepath.Join(o.certDir, webhook.KeyFile), nil
}
