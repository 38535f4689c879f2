package webhook

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/morph-dev/morph/internal/policy"
)

func TestEnsureCertificates(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	hosts, err := CertificateHosts("127.0.0.1:8443", []string{"morph.morph-system.svc", "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	generated, err := EnsureCertificates(dir, hosts, time.Now())
	if err != nil || !generated {
		t.Fatalf("EnsureCertificates = %v, %v", generated, err)
	}
	for name, perm := range map[string]os.FileMode{CAFile: 0o644, CertFile: 0o644, KeyFile: 0o600} {
		info, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if info.Mode().Perm() != perm {
			t.Errorf("%s has mode %v, want %v", name, info.Mode().Perm(), perm)
		}
	}
	roots := x509.NewCertPool()
	caPEM, _ := os.ReadFile(filepath.Join(dir, CAFile))
	if !roots.AppendCertsFromPEM(caPEM) {
		t.Fatal("ca.crt holds no certificate")
	}
	certs, err := LoadCertificates(filepath.Join(dir, CertFile), filepath.Join(dir, KeyFile))
	if err != nil {
		t.Fatal(err)
	}
	leaf := certs.Leaf()
	for _, host := range []string{"127.0.0.1", "morph.morph-system.svc"} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: host}); err != nil {
			t.Errorf("the certificate does not verify for %s: %v", host, err)
		}
	}
	if key, ok := leaf.PublicKey.(*ecdsa.PublicKey); !ok || key.Curve != elliptic.P256() {
		t.Errorf("key %T, want ECDSA P-256", leaf.PublicKey)
	}
	again, err := EnsureCertificates(dir, hosts, time.Now())
	if err != nil || again {
		t.Errorf("existing certificates were regenerated: %v %v", again, err)
	}
}

func TestCertificateHosts(t *testing.T) {
	tests := []struct {
		addr string
		dns  []string
		want []string
	}{
		{":8443", nil, []string{"localhost", "127.0.0.1"}},
		{"0.0.0.0:8443", []string{"morph.svc"}, []string{"localhost", "127.0.0.1", "morph.svc"}},
		{"webhook.example.com:443", nil, []string{"webhook.example.com"}},
		{"[::1]:8443", nil, []string{"::1"}},
	}
	for _, tt := range tests {
		got, err := CertificateHosts(tt.addr, tt.dns)
		if err != nil || !equalStrings(got, tt.want) {
			t.Errorf("CertificateHosts(%q, %q) = %q, %v; want %q", tt.addr, tt.dns, got, err, tt.want)
		}
	}
	if _, err := CertificateHosts("no-port", nil); err == nil {
		t.Error("an address without a port was accepted")
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestCertificatesReloadOnChange(t *testing.T) {
	dir := t.TempDir()
	if _, err := EnsureCertificates(dir, []string{"127.0.0.1"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	certs, err := LoadCertificates(filepath.Join(dir, CertFile), filepath.Join(dir, KeyFile))
	if err != nil {
		t.Fatal(err)
	}
	certs.checkEvery = 0
	first := certs.Leaf().SerialNumber

	// A half-written rotation keeps the old pair.
	if err := os.WriteFile(filepath.Join(dir, CertFile), []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	if c, err := certs.GetCertificate(nil); err != nil || c.Leaf.SerialNumber.Cmp(first) != 0 {
		t.Fatalf("a broken file replaced the pair: %v", err)
	}

	_, certPEM, keyPEM, err := GenerateCertificates([]string{"127.0.0.1"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{CertFile: certPEM, KeyFile: keyPEM} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	c, err := certs.GetCertificate(nil)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(certPEM)
	want, _ := x509.ParseCertificate(block.Bytes)
	if c.Leaf.SerialNumber.Cmp(want.SerialNumber) != 0 {
		t.Error("the rotated certificate is not served")
	}
}

// startServer serves s on a loopback port with generated certificates and returns its
// address, a client trusting its CA, and a function stopping it and returning Serve's
// result.
func startServer(t *testing.T, s *Server, http2 bool) (string, *http.Client, func() error) {
	t.Helper()
	dir := t.TempDir()
	if _, err := EnsureCertificates(dir, []string{"127.0.0.1"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	certs, err := LoadCertificates(filepath.Join(dir, CertFile), filepath.Join(dir, KeyFile))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	caPEM, _ := os.ReadFile(filepath.Join(dir, CAFile))
	roots.AppendCertsFromPEM(caPEM)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- s.Serve(ctx, ln, ServeOptions{TLS: certs.TLSConfig(), HTTP2: http2, ReloadInterval: -1, ShutdownGrace: 5 * time.Second})
	}()
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: roots}, ForceAttemptHTTP2: true,
	}}
	base := "https://" + ln.Addr().String()
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, err := client.Get(base + "/healthz")
		if err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("server did not start: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	var stopped bool
	stop := func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(10 * time.Second):
			t.Fatal("Serve did not return")
			return nil
		}
	}
	t.Cleanup(func() { stop() })
	return base, client, stop
}

func TestServeDrainsInFlightRequestsOnShutdown(t *testing.T) {
	slow := &labelMutator{name: "slow", key: "team", value: "a", sleep: 400 * time.Millisecond, started: make(chan struct{}, 1)}
	s, err := New(Options{Source: bundleSource(&policy.Bundle{Mutators: mutators(slow)}), Admission: true})
	if err != nil {
		t.Fatal(err)
	}
	base, client, stop := startServer(t, s, false)
	type result struct {
		status int
		proto  string
		body   []byte
		err    error
	}
	got := make(chan result, 1)
	go func() {
		resp, err := client.Post(base+"/mutate?timeout=10s", "application/json", bytes.NewReader(admissionBody(t, "inflight", pod(nil))))
		if err != nil {
			got <- result{err: err}
			return
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		got <- result{status: resp.StatusCode, proto: resp.Proto, body: body, err: err}
	}()
	select {
	case <-slow.started:
	case <-time.After(30 * time.Second):
		t.Fatal("the request did not reach the policy")
	}
	if err := stop(); err != nil {
		t.Fatalf("Serve = %v, want nil after draining", err)
	}
	r := <-got
	if r.err != nil || r.status != http.StatusOK || !bytes.Contains(r.body, []byte(`"uid":"inflight"`)) || !bytes.Contains(r.body, []byte(`"patch"`)) {
		t.Fatalf("in-flight request: %d %s %v", r.status, r.body, r.err)
	}
	if r.proto != "HTTP/1.1" {
		t.Errorf("protocol %s, want HTTP/1.1 (HTTP/2 is off by default)", r.proto)
	}
	if resp, err := client.Get(base + "/healthz"); err == nil {
		resp.Body.Close()
		t.Error("the server still accepts requests after shutdown")
	}
}

func TestServeTLSSettings(t *testing.T) {
	s, err := New(Options{Source: bundleSource(&policy.Bundle{}), Admission: true})
	if err != nil {
		t.Fatal(err)
	}
	base, client, _ := startServer(t, s, true)
	resp, err := client.Get(base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Proto != "HTTP/2.0" {
		t.Errorf("protocol %s with HTTP/2 on, want HTTP/2.0", resp.Proto)
	}
	old := client.Transport.(*http.Transport).Clone()
	old.TLSClientConfig.MaxVersion = tls.VersionTLS11
	if resp, err := (&http.Client{Transport: old, Timeout: 5 * time.Second}).Get(base + "/healthz"); err == nil {
		resp.Body.Close()
		t.Error("a TLS 1.1 client was served")
	}
}

// TestEnsureCertificatesRefusesHalfAPair: a folder with only one of tls.crt and tls.key
// is an error naming the missing file, and the file present is left as it is.
func TestEnsureCertificatesRefusesHalfAPair(t *testing.T) {
	tests := []struct {
		present, missing string
	}{
		{present: CertFile, missing: KeyFile},
		{present: KeyFile, missing: CertFile},
	}
	for _, tt := range tests {
		t.Run("only "+tt.present, func(t *testing.T) {
			dir := t.TempDir()
			kept := []byte("the operator's " + tt.present)
			if err := os.WriteFile(filepath.Join(dir, tt.present), kept, 0o600); err != nil {
				t.Fatal(err)
			}
			generated, err := EnsureCertificates(dir, []string{"127.0.0.1"}, time.Now())
			if err == nil || generated {
				t.Fatalf("EnsureCertificates = %v, %v; want an error", generated, err)
			}
			for _, want := range []string{filepath.Join(dir, tt.missing), "remove " + tt.present, "provide both"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err, want)
				}
			}
			if got, _ := os.ReadFile(filepath.Join(dir, tt.present)); !bytes.Equal(got, kept) {
				t.Errorf("%s was overwritten", tt.present)
			}
			if _, err := os.Stat(filepath.Join(dir, tt.missing)); err == nil {
				t.Errorf("%s was written", tt.missing)
			}
		})
	}
}
