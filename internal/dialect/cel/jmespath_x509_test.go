package cel

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// x509TestPEMs are PEM texts made for the test: an RSA certificate with most of the
// fields x509_decode shows, an RSA certificate request, an ECDSA certificate (which
// Kyverno refuses) and a block of another type.
func x509TestPEMs(t *testing.T) map[string]string {
	t.Helper()
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	site, _ := url.Parse("spiffe://example.org/ns/default/sa/web")
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(4242),
		Subject: pkix.Name{
			CommonName: "web.example.org", Organization: []string{"morph"},
			Country: []string{"FR"}, OrganizationalUnit: []string{"tests"},
		},
		NotBefore:             time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		NotAfter:              time.Date(2036, 1, 2, 3, 4, 5, 0, time.UTC),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLen:            1,
		DNSNames:              []string{"web.example.org", "*.web.example.org"},
		IPAddresses:           []net.IP{net.ParseIP("10.0.0.1"), net.ParseIP("2001:db8::1")},
		EmailAddresses:        []string{"ops@example.org"},
		URIs:                  []*url.URL{site},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &rsaKey.PublicKey, rsaKey)
	if err != nil {
		t.Fatal(err)
	}
	csr, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject:  pkix.Name{CommonName: "api.example.org", Organization: []string{"morph"}},
		DNSNames: []string{"api.example.org"},
	}, rsaKey)
	if err != nil {
		t.Fatal(err)
	}
	ecTmpl := *tmpl
	ecTmpl.KeyUsage = x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign
	ecDer, err := x509.CreateCertificate(rand.Reader, &ecTmpl, &ecTmpl, &ecKey.PublicKey, ecKey)
	if err != nil {
		t.Fatal(err)
	}
	enc := func(typ string, b []byte) string { return string(pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b})) }
	return map[string]string{
		"cert":    enc("CERTIFICATE", der),
		"csr":     enc("CERTIFICATE REQUEST", csr),
		"ecdsa":   enc("CERTIFICATE", ecDer),
		"other":   enc("PRIVATE KEY", []byte("not a key")),
		"garbled": enc("CERTIFICATE", []byte("not DER")),
	}
}

// x509DifferentialCases are x509_decode queries over certificates made by the test.
func x509DifferentialCases(t *testing.T) []differentialCase {
	t.Helper()
	pems := x509TestPEMs(t)
	data, err := json.Marshal(map[string]any{
		"pems": pems,
		"b64":  base64.StdEncoding.EncodeToString([]byte(pems["cert"])),
	})
	if err != nil {
		t.Fatal(err)
	}
	var cases []differentialCase
	for _, q := range []string{
		"x509_decode(pems.cert)",
		"x509_decode(pems.csr)",
		"x509_decode(pems.ecdsa)",
		"x509_decode(pems.other)",
		"x509_decode(pems.garbled)",
		"x509_decode(base64_decode(b64)).Subject.CommonName",
		"x509_decode(base64_decode(b64)).PublicKey",
		"x509_decode('not PEM')",
		"x509_decode('')",
	} {
		cases = append(cases, differentialCase{q, string(data)})
	}
	return cases
}

// TestX509DecodeGolden checks x509_decode against Kyverno 1.19.1's answer for a
// fixed certificate and request (testdata/jmespath/x509/*.pem, their *.json made by
// the oracle: {"query": "x509_decode(@)", "data": <the PEM>}). The shape is
// encoding/json's of Go's x509 types, so a Go release that adds a field to them
// changes it for Kyverno too: remake the *.json with the oracle then.
func TestX509DecodeGolden(t *testing.T) {
	for _, name := range []string{"cert", "csr"} {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join("testdata", "jmespath", "x509")
			in, err := os.ReadFile(filepath.Join(dir, name+".pem"))
			if err != nil {
				t.Fatal(err)
			}
			want, err := os.ReadFile(filepath.Join(dir, name+".json"))
			if err != nil {
				t.Fatal(err)
			}
			got, err := searchJMESPath("x509_decode(@)", string(in))
			if err != nil {
				t.Fatal(err)
			}
			if g, w := asJSON(t, got), jsonValue(t, string(want)); !reflect.DeepEqual(g, w) {
				gj, _ := json.MarshalIndent(g, "", "  ")
				t.Fatalf("x509_decode answered\n%s\nKyverno:\n%s", gj, want)
			}
		})
	}
}

// TestX509DecodeFields checks the fields a policy reads in the answer for a
// certificate made here.
func TestX509DecodeFields(t *testing.T) {
	pems := x509TestPEMs(t)
	for _, tt := range []struct{ query, want string }{
		{"Subject.CommonName", `"web.example.org"`},
		{"Subject.Organization", `["morph"]`},
		{"SerialNumber", `4242`},
		{"NotBefore", `"2026-01-02T03:04:05Z"`},
		{"DNSNames", `["web.example.org", "*.web.example.org"]`},
		{"IPAddresses", `["10.0.0.1", "2001:db8::1"]`},
		{"URIs[0].Host", `"example.org"`},
		{"IsCA", `true`},
		{"MaxPathLen", `1`},
		{"PublicKey.E", `65537`},
		{"PublicKeyAlgorithm", `1`},
		{"ExtKeyUsage", `[1, 2]`},
	} {
		t.Run(tt.query, func(t *testing.T) {
			got, err := searchJMESPath("x509_decode(@)."+tt.query, pems["cert"])
			if err != nil {
				t.Fatal(err)
			}
			if g, w := asJSON(t, got), jsonValue(t, tt.want); !reflect.DeepEqual(g, w) {
				t.Fatalf("got %v, want %s", g, tt.want)
			}
		})
	}
	n, err := searchJMESPath("x509_decode(@).PublicKey.N", pems["cert"])
	if err != nil {
		t.Fatal(err)
	}
	if s, ok := n.(string); !ok || len(s) < 600 || strings.Trim(s, "0123456789") != "" {
		t.Fatalf("PublicKey.N is %v, want the modulus in decimal", n)
	}
	for name, wantErr := range map[string]string{
		"ecdsa":   "certificate should use rsa algorithm",
		"other":   "PEM block neither contains a CERTIFICATE or CERTIFICATE REQUEST",
		"garbled": "x509: malformed certificate",
	} {
		if _, err := searchJMESPath("x509_decode(@)", pems[name]); err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Errorf("%s: error %v, want %q", name, err, wantErr)
		}
	}
}
