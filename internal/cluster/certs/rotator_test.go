package certs

import (
	"bytes"
	"context"
	"crypto/x509"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/morph-dev/morph/internal/webhook"
)

const ns = "morph-system"

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func newTestRotator(client *fake.Clientset, c *clock, hosts ...string) *Rotator {
	r := NewRotator()
	r.Client, r.Namespace, r.Hosts, r.Store, r.Now = client, ns, hosts, NewStore(nil), c.now
	r.Validity, r.CAValidity = time.Hour, 100*time.Hour
	return r
}

func reconcile(t *testing.T, r *Rotator) (*corev1.Secret, time.Time) {
	t.Helper()
	next, err := r.Reconcile(context.Background())
	if err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	sec, err := r.Client.CoreV1().Secrets(ns).Get(context.Background(), SecretName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the Secret after Reconcile: %v", err)
	}
	if err := r.Store.Load(sec); err != nil {
		t.Fatalf("the Store does not load the Secret: %v", err)
	}
	return sec, next
}

// served is the serving certificate the store serves, checked against its caBundle.
func served(t *testing.T, s *Store, now time.Time) *x509.Certificate {
	t.Helper()
	cert, err := s.GetCertificate(nil)
	if err != nil {
		t.Fatal(err)
	}
	bundle, _ := s.CABundle()
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(bundle) {
		t.Fatal("caBundle holds no certificate")
	}
	if _, err := cert.Leaf.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: now}); err != nil {
		t.Fatalf("the served certificate does not verify against the caBundle: %v", err)
	}
	return cert.Leaf
}

func TestRotatorCreatesTheSecret(t *testing.T) {
	c := &clock{time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	r := newTestRotator(fake.NewClientset(), c, "morph.morph-system.svc", "morph.morph-system.svc.cluster.local")
	sec, next := reconcile(t, r)
	if sec.Type != corev1.SecretTypeTLS || sec.Labels["app.kubernetes.io/managed-by"] != "morph" {
		t.Errorf("Secret type %q labels %v; want kubernetes.io/tls, managed-by morph", sec.Type, sec.Labels)
	}
	for _, k := range []string{webhook.CAFile, CAKeyFile, webhook.CertFile, webhook.KeyFile} {
		if len(sec.Data[k]) == 0 {
			t.Errorf("Secret lacks %s", k)
		}
	}
	leaf := served(t, r.Store, c.t)
	if got := leaf.DNSNames; len(got) != 2 || got[0] != "morph.morph-system.svc" || got[1] != "morph.morph-system.svc.cluster.local" {
		t.Errorf("DNS names %v", got)
	}
	if want := renewalTime(leaf); !next.Equal(want) {
		t.Errorf("next check %v; want the serving renewal %v", next, want)
	}
}

func TestRotatorRenewsTheServingCertificateFromTheSameCA(t *testing.T) {
	c := &clock{time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	client := fake.NewClientset()
	r := newTestRotator(client, c, "127.0.0.1")
	before, next := reconcile(t, r)
	oldLeaf := served(t, r.Store, c.t)

	c.t = next.Add(-time.Second)
	client.ClearActions()
	unchanged, _ := reconcile(t, r)
	for _, a := range client.Actions() {
		if a.GetVerb() != "get" {
			t.Errorf("before the renewal time the rotator wrote: %s", a.GetVerb())
		}
	}
	if !bytes.Equal(unchanged.Data[webhook.CertFile], before.Data[webhook.CertFile]) {
		t.Error("serving certificate replaced before its renewal time")
	}

	c.t = next
	after, _ := reconcile(t, r)
	newLeaf := served(t, r.Store, c.t)
	if newLeaf.Equal(oldLeaf) {
		t.Fatal("serving certificate not renewed at two thirds of its validity")
	}
	if !bytes.Equal(after.Data[webhook.CAFile], before.Data[webhook.CAFile]) {
		t.Error("the caBundle changed with a serving renewal; the API server would distrust replicas until it learns the new one")
	}
	if len(newLeaf.IPAddresses) != 1 || newLeaf.IPAddresses[0].String() != "127.0.0.1" {
		t.Errorf("IP SANs %v; want 127.0.0.1", newLeaf.IPAddresses)
	}
}

func TestRotatorRenewsTheCAKeepingTheOldOneTrusted(t *testing.T) {
	c := &clock{time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	r := newTestRotator(fake.NewClientset(), c, "morph.test.svc")
	r.Validity, r.CAValidity = 11*time.Hour, 12*time.Hour
	first, next := reconcile(t, r)
	oldCA := parseCertificates(first.Data[webhook.CAFile])[0]
	c.t = next // the serving renewal, before the CA's
	reconcile(t, r)
	leaf := served(t, r.Store, c.t)

	c.t = renewalTime(oldCA)
	after, _ := reconcile(t, r)
	bundle := parseCertificates(after.Data[webhook.CAFile])
	if len(bundle) != 2 || !bundle[1].Equal(oldCA) || bundle[0].Equal(oldCA) {
		t.Fatalf("caBundle after the CA renewal has %d certificates; want the new CA then the old one", len(bundle))
	}
	if !served(t, r.Store, c.t).Equal(leaf) {
		t.Error("the serving certificate changed with the CA; it must stay until the new CA reached the API server")
	}

	// The next serving renewal comes from the new CA; the old CA leaves the bundle
	// when it expires.
	c.t = oldCA.NotAfter
	final, _ := reconcile(t, r)
	bundle = parseCertificates(final.Data[webhook.CAFile])
	if len(bundle) != 1 || bundle[0].Equal(oldCA) {
		t.Errorf("caBundle after the old CA expired has %d certificates; want only the new CA", len(bundle))
	}
	served(t, r.Store, c.t)
}

func TestRotatorPutsBackADeletedSecret(t *testing.T) {
	c := &clock{time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	client := fake.NewClientset()
	r := newTestRotator(client, c, "morph.test.svc")
	before, _ := reconcile(t, r)
	if err := client.CoreV1().Secrets(ns).Delete(context.Background(), SecretName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	after, _ := reconcile(t, r)
	if !sameData(before.Data, after.Data) {
		t.Error("a deleted Secret came back with new certificates; want the ones every replica serves")
	}
}

func TestRotatorReissuesForNewHosts(t *testing.T) {
	c := &clock{time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	client := fake.NewClientset()
	r := newTestRotator(client, c, "127.0.0.1")
	before, _ := reconcile(t, r)
	r.Hosts = []string{"morph.other.svc"}
	after, _ := reconcile(t, r)
	if got := served(t, r.Store, c.t).DNSNames; len(got) != 1 || got[0] != "morph.other.svc" {
		t.Errorf("DNS names %v after the hosts changed", got)
	}
	if !bytes.Equal(after.Data[webhook.CAFile], before.Data[webhook.CAFile]) {
		t.Error("the caBundle changed with new hosts")
	}
}

func TestRotatorRepairsABrokenSecret(t *testing.T) {
	c := &clock{time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	client := fake.NewClientset(&corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: SecretName, Namespace: ns},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{webhook.CertFile: []byte("junk"), webhook.KeyFile: []byte("junk")},
	})
	r := newTestRotator(client, c, "morph.test.svc")
	reconcile(t, r)
	served(t, r.Store, c.t)
}

func TestStoreKeepsTheLastGoodPair(t *testing.T) {
	c := &clock{time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	r := newTestRotator(fake.NewClientset(), c, "morph.test.svc")
	reconcile(t, r)
	good := served(t, r.Store, c.t)
	bad := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: SecretName, Namespace: ns}, Data: map[string][]byte{webhook.CertFile: []byte("half written")}}
	if err := r.Store.Load(bad); err == nil {
		t.Fatal("Load accepted a Secret without a pair")
	}
	if !served(t, r.Store, c.t).Equal(good) {
		t.Error("a bad Secret replaced the served certificate")
	}
}

func TestStoreBeforeTheSecret(t *testing.T) {
	s := NewStore(nil)
	if _, err := s.GetCertificate(nil); err == nil {
		t.Error("GetCertificate succeeded with no Secret loaded")
	}
	if _, ok := s.CABundle(); ok {
		t.Error("CABundle reported a bundle with no Secret loaded")
	}
}
