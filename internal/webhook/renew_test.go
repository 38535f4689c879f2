package webhook

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode(data)
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A generated serving certificate is renewed well before it expires, under the same
// CA (the caBundle stays valid); one the operator provided is never touched. It used
// to be kept until it expired, since only the files' presence was checked.
func TestCertificatesRenewBeforeExpiry(t *testing.T) {
	dir := t.TempDir()
	hosts := []string{"127.0.0.1"}
	start := time.Now()
	if _, err := EnsureCertificates(dir, hosts, start); err != nil {
		t.Fatal(err)
	}
	first := readCert(t, filepath.Join(dir, CertFile))
	tests := []struct {
		at    time.Time
		renew bool
	}{
		{start.AddDate(0, 6, 0), false}, // half the lifetime left
		{start.AddDate(0, 8, 15), true}, // less than a third left
	}
	for _, tt := range tests {
		renewed, err := RenewCertificates(dir, hosts, tt.at)
		if err != nil || renewed != tt.renew {
			t.Fatalf("at %s: renewed = %v, %v; want %v", tt.at, renewed, err, tt.renew)
		}
	}
	second := readCert(t, filepath.Join(dir, CertFile))
	if second.SerialNumber.Cmp(first.SerialNumber) == 0 {
		t.Fatal("the certificate was not replaced")
	}
	ca := readCert(t, filepath.Join(dir, CAFile))
	if err := second.CheckSignatureFrom(ca); err != nil {
		t.Fatalf("the renewed certificate is not signed by ca.crt: %v", err)
	}
	if _, err := LoadCertificates(filepath.Join(dir, CertFile), filepath.Join(dir, KeyFile)); err != nil {
		t.Fatalf("the renewed pair does not load: %v", err)
	}
	// EnsureCertificates at start-up renews too.
	if _, err := EnsureCertificates(dir, hosts, start.AddDate(1, 8, 0)); err != nil {
		t.Fatal(err)
	}
	if third := readCert(t, filepath.Join(dir, CertFile)); third.SerialNumber.Cmp(second.SerialNumber) == 0 {
		t.Fatal("EnsureCertificates did not renew a certificate due for renewal")
	}

}
