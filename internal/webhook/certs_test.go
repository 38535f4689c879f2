package webhook

import (
	"bytes"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"log/slog"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/morph-dev/morph/internal/policy"
)

// serialOf is the serial number of a PEM certificate.
func serialOf(t *testing.T, certPEM []byte) *big.Int {
	t.Helper()
	block, _ := pem.Decode(certPEM)
	if block == nil {
		t.Fatal("no PEM certificate")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert.SerialNumber
}

// TestCertificateReloadsAreLoggedAndCounted: a rotated pair that does not load is logged
// at error level and counted once per distinct error while the last good pair is
// served; a pair that loads is served and counted.
func TestCertificateReloadsAreLoggedAndCounted(t *testing.T) {
	dir := t.TempDir()
	certPath, keyPath := filepath.Join(dir, CertFile), filepath.Join(dir, KeyFile)
	if _, err := EnsureCertificates(dir, []string{"127.0.0.1"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	_, rotatedCert, rotatedKey, err := GenerateCertificates([]string{"127.0.0.1"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	_, strayCert, _, err := GenerateCertificates([]string{"127.0.0.1"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	s, err := New(Options{Source: bundleSource(&policy.Bundle{}), Admission: true, Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	certs, err := LoadCertificates(certPath, keyPath)
	if err != nil {
		t.Fatal(err)
	}
	certs.checkEvery = 0 // every handshake looks at the files
	config := s.TLSConfig(certs)
	served := certs.Leaf().SerialNumber

	steps := []struct {
		name string
		// write replaces these files (by path) before the handshakes.
		write map[string][]byte
		// rotated says the files written are served from now on.
		rotated bool
		// failures and successes are the counters after the step; errorLogs the error
		// lines logged so far, the last of which names lastError.
		failures, successes, errorLogs int
		lastError                      string
	}{
		{
			name:     "a half-written certificate keeps the last good pair",
			write:    map[string][]byte{certPath: []byte("garbage")},
			failures: 1, errorLogs: 1, lastError: "failed to find any PEM data",
		},
		{
			name:     "the same failure on later handshakes is reported once",
			failures: 1, errorLogs: 1, lastError: "failed to find any PEM data",
		},
		{
			name:     "a certificate of another key is a new failure",
			write:    map[string][]byte{certPath: strayCert},
			failures: 2, errorLogs: 2, lastError: "private key does not match public key",
		},
		{
			name:     "a complete rotation is served and counted",
			write:    map[string][]byte{certPath: rotatedCert, keyPath: rotatedKey},
			rotated:  true,
			failures: 2, successes: 1, errorLogs: 2,
		},
		{
			name:     "the failure seen before a success is reported again after it",
			write:    map[string][]byte{certPath: []byte("garbage")},
			failures: 3, successes: 1, errorLogs: 3, lastError: "failed to find any PEM data",
		},
	}
	for _, st := range steps {
		for path, data := range st.write {
			if err := os.WriteFile(path, data, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if st.rotated {
			served = serialOf(t, st.write[certPath])
		}
		for range 3 {
			c, err := config.GetCertificate(nil)
			if err != nil || c.Leaf.SerialNumber.Cmp(served) != 0 {
				t.Fatalf("%s: served serial %v (%v), want %v", st.name, c.Leaf.SerialNumber, err, served)
			}
		}
		metrics := get(t, s.Handler(), "/metrics")
		for outcome, n := range map[string]int{"failure": st.failures, "success": st.successes} {
			if want := fmt.Sprintf(`morph_certificate_reloads_total{outcome=%q} %d`, outcome, n); !strings.Contains(metrics, want) {
				t.Errorf("%s: metrics lack %q", st.name, want)
			}
		}
		var errorLines []map[string]any
		for l := range strings.SplitSeq(strings.TrimSpace(logs.String()), "\n") {
			if l == "" {
				continue
			}
			var line map[string]any
			if err := json.Unmarshal([]byte(l), &line); err != nil {
				t.Fatal(err)
			}
			if line["level"] == "ERROR" {
				errorLines = append(errorLines, line)
			}
		}
		if len(errorLines) != st.errorLogs {
			t.Fatalf("%s: %d error lines, want %d:\n%s", st.name, len(errorLines), st.errorLogs, logs.String())
		}
		if st.lastError != "" {
			last, _ := errorLines[len(errorLines)-1]["error"].(string)
			if !strings.Contains(last, st.lastError) || !strings.Contains(last, certPath) {
				t.Errorf("%s: last error logged %q, want it to name %s and %q", st.name, last, certPath, st.lastError)
			}
		}
	}
}
