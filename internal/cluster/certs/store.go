// Package certs keeps morph's webhook certificates in a Secret when morph runs in a
// cluster without certificates of its own (--cert-dir, --tls-cert).
//
// The Secret (morph-webhook-tls in morph's namespace, type kubernetes.io/tls) holds
// ca.crt (the caBundle: the current CA first, then older CAs that are not expired yet),
// ca.key (the current CA's key), tls.crt and tls.key (the serving pair). Every replica
// reads it with an informer into a Store and serves its pair from memory: a new pair is
// used from the next TLS handshake, without a restart. The leader runs a Rotator, which
// creates the Secret, renews the serving certificate at two thirds of its lifetime from
// the same CA (so that the caBundle does not change and no replica's certificate is
// ever untrusted), renews the CA at two thirds of its lifetime by adding the new CA to
// the bundle (the serving certificate moves to it at its next renewal, long after the
// bundle reached the API server), and puts the Secret back from memory when it is
// deleted.
package certs

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/morph-dev/morph/internal/webhook"
)

// SecretName is the Secret holding the certificates, in morph's namespace.
const SecretName = "morph-webhook-tls"

// Keys of the Secret's data besides webhook.CAFile, webhook.CertFile and webhook.KeyFile.
const CAKeyFile = "ca.key"

// Store serves the certificates of the Secret. It is safe for concurrent use.
type Store struct {
	log     *slog.Logger
	current atomic.Pointer[pair]
	metrics *storeMetrics

	mu   sync.Mutex // guards subs
	subs []chan struct{}
}

// pair is one loaded state of the Secret.
type pair struct {
	cert     *tls.Certificate
	caBundle []byte
	// data is the Secret's data as loaded, for the Rotator to put back.
	data map[string][]byte
}

// NewStore returns an empty Store: GetCertificate fails until Load or Watch loads the
// Secret.
func NewStore(log *slog.Logger) *Store {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Store{log: log, metrics: newStoreMetrics()}
}

// Collectors are the store's metrics.
func (s *Store) Collectors() []prometheus.Collector {
	return []prometheus.Collector{s.metrics.loads, s.metrics.notAfter}
}

// GetCertificate implements tls.Config.GetCertificate.
func (s *Store) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	p := s.current.Load()
	if p == nil {
		return nil, fmt.Errorf("no serving certificate yet: waiting for Secret %s (the leader creates it)", SecretName)
	}
	return p.cert, nil
}

// TLSConfig is a server configuration serving the store's certificate, TLS 1.2 or later.
func (s *Store) TLSConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: s.GetCertificate}
}

// CABundle is the PEM CA bundle of the loaded Secret; false until one is loaded.
func (s *Store) CABundle() ([]byte, bool) {
	p := s.current.Load()
	if p == nil {
		return nil, false
	}
	return p.caBundle, true
}

// data is the loaded Secret's data, nil before the first load.
func (s *Store) data() map[string][]byte {
	if p := s.current.Load(); p != nil {
		return p.data
	}
	return nil
}

// Changed returns a channel that receives (without blocking the store) after every
// event of the Secret: loaded, changed or deleted.
func (s *Store) Changed() <-chan struct{} {
	ch := make(chan struct{}, 1)
	s.mu.Lock()
	s.subs = append(s.subs, ch)
	s.mu.Unlock()
	return ch
}

func (s *Store) notify() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ch := range s.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// Load serves the Secret's pair from now on. A Secret that does not hold a usable pair
// is an error and the last good pair stays.
func (s *Store) Load(secret *corev1.Secret) error {
	err := s.load(secret)
	if err != nil {
		s.metrics.loads.WithLabelValues("failure").Inc()
		s.log.Error("certificate Secret not loaded; serving the last good certificate", "secret", secret.Namespace+"/"+secret.Name, "error", err)
	}
	s.notify()
	return err
}

func (s *Store) load(secret *corev1.Secret) error {
	d := secret.Data
	if old := s.current.Load(); old != nil && sameData(old.data, d) {
		return nil
	}
	cert, err := tls.X509KeyPair(d[webhook.CertFile], d[webhook.KeyFile])
	if err != nil {
		return fmt.Errorf("%s and %s: %w", webhook.CertFile, webhook.KeyFile, err)
	}
	bundle := d[webhook.CAFile]
	if len(parseCertificates(bundle)) == 0 {
		return fmt.Errorf("%s holds no PEM certificate", webhook.CAFile)
	}
	data := make(map[string][]byte, len(d))
	for k, v := range d {
		data[k] = bytes.Clone(v)
	}
	s.current.Store(&pair{cert: &cert, caBundle: data[webhook.CAFile], data: data})
	s.metrics.loads.WithLabelValues("success").Inc()
	s.metrics.notAfter.Set(float64(cert.Leaf.NotAfter.Unix()))
	s.log.Info("serving certificate loaded from Secret", "secret", secret.Namespace+"/"+secret.Name,
		"notAfter", cert.Leaf.NotAfter, "dnsNames", cert.Leaf.DNSNames, "ipAddresses", cert.Leaf.IPAddresses)
	return nil
}

func sameData(a, b map[string][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !bytes.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

// Watch loads the Secret and every change of it until ctx ends. A deleted Secret
// leaves the last pair served (the leader puts it back). It returns once the informer
// stopped.
func (s *Store) Watch(ctx context.Context, client kubernetes.Interface, namespace string) {
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", SecretName).String()
		}))
	informer := factory.Core().V1().Secrets().Informer()
	load := func(obj any) {
		if sec, ok := obj.(*corev1.Secret); ok && sec.Name == SecretName {
			_ = s.Load(sec) // Load logs and counts its failure
		}
	}
	_, _ = informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    load,
		UpdateFunc: func(_, obj any) { load(obj) },
		DeleteFunc: func(any) {
			s.log.Warn("certificate Secret deleted; serving the last certificate until the leader puts it back", "secret", namespace+"/"+SecretName)
			s.notify()
		},
	})
	factory.Start(ctx.Done())
	<-ctx.Done()
	factory.Shutdown()
}

// parseCertificates returns the certificates of a PEM bundle, skipping what does not
// parse.
func parseCertificates(bundle []byte) []*x509.Certificate {
	var out []*x509.Certificate
	rest := bundle
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			return out
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		if c, err := x509.ParseCertificate(block.Bytes); err == nil {
			out = append(out, c)
		}
	}
}

type storeMetrics struct {
	loads    *prometheus.CounterVec
	notAfter prometheus.Gauge
}

func newStoreMetrics() *storeMetrics {
	m := &storeMetrics{
		loads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "morph", Name: "certificate_secret_loads_total",
			Help: "Loads of the certificate Secret " + SecretName + " by outcome (success, failure: the last good certificate is still served).",
		}, []string{"outcome"}),
		notAfter: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "morph", Name: "certificate_not_after_timestamp_seconds",
			Help: "End of validity of the serving certificate loaded from " + SecretName + ", in Unix seconds.",
		}),
	}
	m.loads.WithLabelValues("success")
	m.loads.WithLabelValues("failure")
	return m
}
