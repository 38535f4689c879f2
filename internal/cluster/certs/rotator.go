package certs

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/morph-dev/morph/internal/webhook"
)

// maxWait bounds the wait between two checks of the Secret when nothing happens.
const maxWait = time.Hour

// Rotator keeps the Secret current: it is a leader-only writer (leader.Runnable).
type Rotator struct {
	Client    kubernetes.Interface
	Namespace string
	// Hosts are the DNS names and IP addresses the serving certificate is for.
	Hosts []string
	// Validity of a serving certificate (webhook.ServingValidity when 0) and of a CA
	// (webhook.CAValidity when 0).
	Validity, CAValidity time.Duration
	// Store is the replica's Store: its events wake the Rotator, and its last pair is
	// what a deleted Secret is recreated with.
	Store *Store
	// Now returns the current time (time.Now when nil).
	Now func() time.Time
	Log *slog.Logger

	rotations *prometheus.CounterVec
	// changed is the Rotator's subscription to the Store, made at the first Run.
	changed <-chan struct{}
}

// NewRotator returns a Rotator with its metrics; fill in the fields before Run.
func NewRotator() *Rotator {
	return &Rotator{rotations: prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "morph", Name: "certificate_rotations_total",
		Help: "Certificates the leader generated into " + SecretName + ", by what (ca, serving).",
	}, []string{"what"})}
}

func (r *Rotator) defaults() {
	if r.Now == nil {
		r.Now = time.Now
	}
	if r.Log == nil {
		r.Log = slog.New(slog.DiscardHandler)
	}
	if r.rotations == nil {
		r.rotations = NewRotator().rotations
	}
}

// Collectors are the rotator's metrics.
func (r *Rotator) Collectors() []prometheus.Collector { return []prometheus.Collector{r.rotations} }

// Run keeps the Secret current until ctx ends: at start, after each event of the
// Secret, and at the next renewal time. An API error ends Run (the elector runs it
// again).
func (r *Rotator) Run(ctx context.Context) error {
	if r.changed == nil {
		r.changed = r.Store.Changed()
	}
	for {
		next, err := r.Reconcile(ctx)
		if err != nil {
			return err
		}
		wait := min(max(next.Sub(r.Now()), 0), maxWait)
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-r.changed:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// Reconcile brings the Secret to a state that needs nothing before next: created when
// missing (from the Store's last pair when that is still good), certificates renewed
// when due.
func (r *Rotator) Reconcile(ctx context.Context) (next time.Time, err error) {
	r.defaults()
	secrets := r.Client.CoreV1().Secrets(r.Namespace)
	sec, err := secrets.Get(ctx, SecretName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		data, next, err := r.plan(r.Store.data())
		if err != nil {
			return time.Time{}, err
		}
		sec = &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: SecretName, Namespace: r.Namespace, Labels: map[string]string{"app.kubernetes.io/managed-by": "morph"}},
			Type:       corev1.SecretTypeTLS,
			Data:       data,
		}
		if _, err := secrets.Create(ctx, sec, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return time.Time{}, fmt.Errorf("creating Secret %s/%s: %w", r.Namespace, SecretName, err)
		}
		r.Log.Info("certificate Secret created", "secret", r.Namespace+"/"+SecretName)
		return next, nil
	case err != nil:
		return time.Time{}, fmt.Errorf("reading Secret %s/%s: %w", r.Namespace, SecretName, err)
	}
	data, next, err := r.plan(sec.Data)
	if err != nil {
		return time.Time{}, err
	}
	if sameData(data, sec.Data) && sec.Type == corev1.SecretTypeTLS {
		return next, nil
	}
	if sec.Type != corev1.SecretTypeTLS {
		// The type is immutable: replace the Secret.
		if err := secrets.Delete(ctx, SecretName, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &sec.ResourceVersion}}); err != nil {
			return time.Time{}, fmt.Errorf("replacing Secret %s/%s of type %s: %w", r.Namespace, SecretName, sec.Type, err)
		}
		return r.Reconcile(ctx)
	}
	sec = sec.DeepCopy()
	sec.Data = data
	if _, err := secrets.Update(ctx, sec, metav1.UpdateOptions{}); err != nil {
		return time.Time{}, fmt.Errorf("updating Secret %s/%s: %w", r.Namespace, SecretName, err)
	}
	r.Log.Info("certificate Secret updated", "secret", r.Namespace+"/"+SecretName)
	return next, nil
}

// plan returns the Secret data that follows from data now (data itself when nothing is
// due), and when it must be looked at again.
func (r *Rotator) plan(data map[string][]byte) (map[string][]byte, time.Time, error) {
	now := r.Now()
	validity, caValidity := r.Validity, r.CAValidity
	if validity <= 0 {
		validity = webhook.ServingValidity
	}
	if caValidity <= 0 {
		caValidity = webhook.CAValidity
	}
	out := map[string][]byte{}
	for k, v := range data {
		out[k] = v
	}
	caPEM, caKeyPEM := firstCertificatePEM(data[webhook.CAFile]), data[CAKeyFile]
	ca, caOK := parseCA(caPEM, caKeyPEM, now)
	var bundle []*x509.Certificate
	for _, c := range parseCertificates(data[webhook.CAFile]) {
		if now.Before(c.NotAfter) {
			bundle = append(bundle, c)
		}
	}
	if !caOK || !now.Before(renewalTime(ca)) {
		newCA, newKey, err := webhook.GenerateCA(now, caValidity)
		if err != nil {
			return nil, time.Time{}, err
		}
		r.rotations.WithLabelValues("ca").Inc()
		caPEM, caKeyPEM = newCA, newKey
		ca, _ = parseCA(caPEM, caKeyPEM, now)
		r.Log.Info("generated a new webhook CA; older CAs stay in the caBundle until they expire", "notAfter", ca.NotAfter)
		bundle = append([]*x509.Certificate{ca}, slices.DeleteFunc(bundle, func(c *x509.Certificate) bool { return c.Equal(ca) })...)
	}
	out[CAKeyFile] = caKeyPEM
	out[webhook.CAFile] = encodeBundle(bundle)

	serving, servingOK := parseServing(data[webhook.CertFile], data[webhook.KeyFile], bundle, now)
	why := ""
	switch {
	case !servingOK:
		why = "missing or not trusted by the caBundle"
	case !now.Before(renewalTime(serving)):
		why = "two thirds of its validity passed"
	case !sameHosts(serving, r.Hosts):
		why = "its hosts differ from " + strings.Join(r.Hosts, ",")
	}
	if why != "" {
		certPEM, keyPEM, err := webhook.IssueServingCertificate(caPEM, caKeyPEM, r.Hosts, now, validity)
		if err != nil {
			return nil, time.Time{}, err
		}
		r.rotations.WithLabelValues("serving").Inc()
		out[webhook.CertFile], out[webhook.KeyFile] = certPEM, keyPEM
		serving, _ = parseServing(certPEM, keyPEM, bundle, now)
		r.Log.Info("issued a new serving certificate", "reason", why, "hosts", strings.Join(r.Hosts, ","), "notAfter", serving.NotAfter)
	}
	return out, earliest(renewalTime(ca), renewalTime(serving)), nil
}

// renewalTime is two thirds into c's validity.
func renewalTime(c *x509.Certificate) time.Time {
	return c.NotBefore.Add(c.NotAfter.Sub(c.NotBefore) * 2 / 3)
}

func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// parseCA returns the CA of a certificate and key that match and are valid now.
func parseCA(certPEM, keyPEM []byte, now time.Time) (*x509.Certificate, bool) {
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil || pair.Leaf == nil || !pair.Leaf.IsCA || !now.Before(pair.Leaf.NotAfter) {
		return nil, false
	}
	return pair.Leaf, true
}

// parseServing returns the serving certificate of a pair that matches, is valid now and
// chains to a CA of bundle.
func parseServing(certPEM, keyPEM []byte, bundle []*x509.Certificate, now time.Time) (*x509.Certificate, bool) {
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil || pair.Leaf == nil {
		return nil, false
	}
	roots := x509.NewCertPool()
	for _, c := range bundle {
		roots.AddCert(c)
	}
	if _, err := pair.Leaf.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		return nil, false
	}
	return pair.Leaf, true
}

func sameHosts(c *x509.Certificate, hosts []string) bool {
	var have []string
	have = append(have, c.DNSNames...)
	for _, ip := range c.IPAddresses {
		have = append(have, ip.String())
	}
	var want []string
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			h = ip.String()
		}
		want = append(want, h)
	}
	slices.Sort(have)
	slices.Sort(want)
	return slices.Equal(slices.Compact(have), slices.Compact(want))
}

func firstCertificatePEM(bundle []byte) []byte {
	for rest := bundle; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			return nil
		}
		if block.Type == "CERTIFICATE" {
			return pem.EncodeToMemory(block)
		}
	}
}

func encodeBundle(certs []*x509.Certificate) []byte {
	var b bytes.Buffer
	for _, c := range certs {
		_ = pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: c.Raw}) // a bytes.Buffer does not fail
	}
	return b.Bytes()
}
