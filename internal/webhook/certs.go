package webhook

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"
)

// File names in a certificate folder.
const (
	CAFile = "ca.crt"
	// CAKeyFile is the generated CA's key, kept (0600) so that the serving certificate
	// is renewed under the same CA and the caBundle stays valid.
	CAKeyFile = "ca.key"
	CertFile  = "tls.crt"
	KeyFile   = "tls.key"
)

// Certificates serves a certificate and key pair from files, reloading them when their
// modification time or size changes, so that a rotated certificate (a cert-manager
// Secret update) is used without a restart. It is safe for concurrent use.
type Certificates struct {
	certFile, keyFile string
	// checkEvery bounds how often the files are examined.
	checkEvery time.Duration
	now        func() time.Time

	mu        sync.Mutex // guards the fields below
	cert      *tls.Certificate
	stamp     [2]fileStamp
	checkedAt time.Time
	// onReload, when set, is told the reloads worth reporting (see OnReload).
	onReload func(CertificateReload)
	// failure is the error of the last failed reload, "" once the files load (or are
	// back as they were).
	failure string
}

// CertificateReload is the outcome of a reload of changed certificate files.
type CertificateReload struct {
	CertFile, KeyFile string
	// Leaf is the certificate served from now on: the new one, or after a failure the
	// last good one.
	Leaf *x509.Certificate
	// Err is why the files did not load; nil when the new pair is served.
	Err error
}

type fileStamp struct {
	mod  time.Time
	size int64
}

func stampOf(path string) (fileStamp, error) {
	info, err := os.Stat(path)
	if err != nil {
		return fileStamp{}, err
	}
	return fileStamp{mod: info.ModTime(), size: info.Size()}, nil
}

// LoadCertificates reads a certificate and key pair and returns a source that keeps them
// current.
func LoadCertificates(certFile, keyFile string) (*Certificates, error) {
	c := &Certificates{certFile: certFile, keyFile: keyFile, checkEvery: time.Second, now: time.Now}
	if _, err := c.refresh(); err != nil {
		return nil, err
	}
	return c, nil
}

// refresh reloads the pair when either file changed, and says whether it did. Called
// with mu held, or before c is shared.
func (c *Certificates) refresh() (reloaded bool, err error) {
	cs, err := stampOf(c.certFile)
	if err != nil {
		return false, fmt.Errorf("TLS certificate: %w", err)
	}
	ks, err := stampOf(c.keyFile)
	if err != nil {
		return false, fmt.Errorf("TLS key: %w", err)
	}
	if c.cert != nil && cs == c.stamp[0] && ks == c.stamp[1] {
		return false, nil
	}
	pair, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
	if err != nil {
		return false, fmt.Errorf("TLS certificate %s and key %s: %w", c.certFile, c.keyFile, err)
	}
	c.cert, c.stamp = &pair, [2]fileStamp{cs, ks}
	return true, nil
}

// OnReload sets the function told the reloads of changed files after the first load:
// each success, and each failure whose error differs from the last failure's, so that
// files that stay broken are reported once rather than at every handshake. It is called
// outside c's lock, from the handshake that noticed the change. Server.TLSConfig sets it
// to log and count the reloads.
func (c *Certificates) OnReload(report func(CertificateReload)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.onReload = report
}

// GetCertificate implements tls.Config.GetCertificate. When the files changed but cannot
// be loaded (a rotation caught half written), the previous pair is served until they
// load.
func (c *Certificates) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c.mu.Lock()
	var report func(CertificateReload)
	var reload CertificateReload
	if now := c.now(); now.Sub(c.checkedAt) >= c.checkEvery {
		c.checkedAt = now
		report, reload = c.check()
	}
	cert := c.cert
	c.mu.Unlock()
	if report != nil {
		report(reload)
	}
	return cert, nil
}

// check reloads changed files, keeping the last good pair when they do not load, and
// returns the reload to report with the function to report it to (nil when there is
// nothing new to report). Called with mu held.
func (c *Certificates) check() (func(CertificateReload), CertificateReload) {
	reloaded, err := c.refresh()
	reload := CertificateReload{CertFile: c.certFile, KeyFile: c.keyFile, Leaf: c.cert.Leaf, Err: err}
	switch {
	case err != nil && err.Error() == c.failure:
		return nil, reload
	case err != nil:
		c.failure = err.Error()
		return c.onReload, reload
	}
	c.failure = ""
	if !reloaded {
		return nil, reload
	}
	return c.onReload, reload
}

// Leaf returns the parsed serving certificate currently used.
func (c *Certificates) Leaf() *x509.Certificate {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cert.Leaf
}

// TLSConfig returns a server configuration that serves these certificates with TLS 1.2
// or later.
func (c *Certificates) TLSConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: c.GetCertificate}
}

// EnsureCertificates makes sure dir holds tls.crt and tls.key. When both are missing it
// generates a CA and a serving certificate signed by it (ECDSA P-256) for hosts (IP
// addresses or DNS names), writes ca.crt, ca.key, tls.crt and tls.key (keys 0600), and
// returns true. When both exist, a serving certificate morph generated is renewed as
// RenewCertificates says. When only one of them exists it is an error: the file present
// is not the operator's to lose.
func EnsureCertificates(dir string, hosts []string, now time.Time) (generated bool, err error) {
	certPath, keyPath := filepath.Join(dir, CertFile), filepath.Join(dir, KeyFile)
	_, certErr := os.Stat(certPath)
	_, keyErr := os.Stat(keyPath)
	if certErr == nil && keyErr == nil {
		_, err := RenewCertificates(dir, hosts, now)
		return false, err
	}
	for _, err := range []error{certErr, keyErr} {
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return false, fmt.Errorf("certificate folder %s: %w", dir, err)
		}
	}
	switch {
	case certErr == nil:
		return false, fmt.Errorf("certificate folder %s has %s but not %s: remove %s to generate a new pair, or provide both", dir, CertFile, keyPath, CertFile)
	case keyErr == nil:
		return false, fmt.Errorf("certificate folder %s has %s but not %s: remove %s to generate a new pair, or provide both", dir, KeyFile, certPath, KeyFile)
	}
	if len(hosts) == 0 {
		return false, errors.New("generating a serving certificate needs at least one host name or IP address")
	}
	if err := generateInto(dir, hosts, now); err != nil {
		return false, err
	}
	return true, nil
}

// generateInto writes a new CA and serving certificate into dir.
func generateInto(dir string, hosts []string, now time.Time) error {
	caPEM, caKeyPEM, err := GenerateCA(now, CAValidity)
	if err != nil {
		return err
	}
	certPEM, keyPEM, err := IssueServingCertificate(caPEM, caKeyPEM, hosts, now, ServingValidity)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("certificate folder: %w", err)
	}
	return writeFiles(dir, []pemFile{{CAFile, caPEM, 0o644}, {CAKeyFile, caKeyPEM, 0o600}, {KeyFile, keyPEM, 0o600}, {CertFile, certPEM, 0o644}})
}

type pemFile struct {
	name string
	data []byte
	perm fs.FileMode
}

func writeFiles(dir string, files []pemFile) error {
	for _, f := range files {
		if err := writeFileAtomic(filepath.Join(dir, f.name), f.data, f.perm); err != nil {
			return err
		}
	}
	return nil
}

// caCommonName marks the CAs morph generates.
const caCommonName = "morph webhook CA"

// renewWithin is when a generated serving certificate is renewed: when less than a
// third of its lifetime, or less than 30 days, remains.
func renewWithin(cert *x509.Certificate, now time.Time) bool {
	left := cert.NotAfter.Sub(now)
	return left < cert.NotAfter.Sub(cert.NotBefore)/3 || left < 30*24*time.Hour
}

// RenewCertificates renews the serving certificate in dir when morph generated it (its
// issuer is the CA of ca.crt, named "morph webhook CA") and it is due (renewWithin):
// a new key and certificate for hosts, signed by the same CA (ca.key), so that the
// caBundle stays valid; without ca.key (a folder from an older morph) a new CA too,
// whose ca.crt must then become the caBundle. A certificate the operator provided is
// never touched. The running server reloads the files when they change.
func RenewCertificates(dir string, hosts []string, now time.Time) (renewed bool, err error) {
	certPEM, err := os.ReadFile(filepath.Join(dir, CertFile))
	if err != nil {
		return false, fmt.Errorf("certificate folder %s: %w", dir, err)
	}
	block, _ := pem.Decode(certPEM)
	if block == nil {
		return false, nil // not ours to judge: loading it reports the problem
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil || cert.Issuer.CommonName != caCommonName || !renewWithin(cert, now) {
		return false, nil //nolint:nilerr // not a certificate morph generated: loading it reports any problem
	}
	if len(hosts) == 0 {
		return false, errors.New("renewing the serving certificate needs at least one host name or IP address")
	}
	ca, caPEM, caKeyPEM, err := readCA(dir)
	if err != nil {
		return false, err
	}
	if ca == nil || renewWithin(ca, now) || cert.CheckSignatureFrom(ca) != nil {
		// No usable CA key: start over with a new CA.
		return true, generateInto(dir, hosts, now)
	}
	newCert, newKey, err := IssueServingCertificate(caPEM, caKeyPEM, hosts, now, ServingValidity)
	if err != nil {
		return false, err
	}
	return true, writeFiles(dir, []pemFile{{KeyFile, newKey, 0o600}, {CertFile, newCert, 0o644}})
}

// readCA reads ca.crt and ca.key; nil when either is missing or unusable (a new CA is
// then made).
func readCA(dir string) (ca *x509.Certificate, caPEM, caKeyPEM []byte, err error) {
	caPEM, err1 := os.ReadFile(filepath.Join(dir, CAFile))
	caKeyPEM, err2 := os.ReadFile(filepath.Join(dir, CAKeyFile))
	if errors.Is(err1, fs.ErrNotExist) || errors.Is(err2, fs.ErrNotExist) {
		return nil, nil, nil, nil
	}
	if err := errors.Join(err1, err2); err != nil {
		return nil, nil, nil, fmt.Errorf("certificate folder %s: %w", dir, err)
	}
	pair, err := tls.X509KeyPair(caPEM, caKeyPEM)
	if err != nil {
		return nil, nil, nil, nil //nolint:nilerr // an unusable CA means a new one, not an error
	}
	ca = pair.Leaf
	if ca == nil {
		if ca, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return nil, nil, nil, nil //nolint:nilerr // as above
		}
	}
	return ca, caPEM, caKeyPEM, nil
}

// writeFileAtomic writes through a temporary file and a rename, so a reader never sees a
// half-written certificate.
func writeFileAtomic(path string, data []byte, perm fs.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	// After the rename the temporary name is gone and Remove fails harmlessly.
	defer func() { _ = os.Remove(tmp.Name()) }()
	if err := tmp.Chmod(perm); err != nil {
		return errors.Join(fmt.Errorf("writing %s: %w", path, err), tmp.Close())
	}
	if _, err := tmp.Write(data); err != nil {
		return errors.Join(fmt.Errorf("writing %s: %w", path, err), tmp.Close())
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// Validity of generated certificates.
const (
	// CAValidity is how long a generated CA is valid.
	CAValidity = 10 * 365 * 24 * time.Hour
	// ServingValidity is how long a generated serving certificate is valid.
	ServingValidity = 365 * 24 * time.Hour
)

// GenerateCertificates creates a CA (valid 10 years) and a serving certificate signed by
// it (valid 1 year) for hosts, and returns them PEM encoded with the serving key.
func GenerateCertificates(hosts []string, now time.Time) (caPEM, certPEM, keyPEM []byte, err error) {
	caPEM, caKeyPEM, err := GenerateCA(now, CAValidity)
	if err != nil {
		return nil, nil, nil, err
	}
	certPEM, keyPEM, err = IssueServingCertificate(caPEM, caKeyPEM, hosts, now, ServingValidity)
	if err != nil {
		return nil, nil, nil, err
	}
	return caPEM, certPEM, keyPEM, nil
}

// GenerateCA creates a self-signed CA (ECDSA P-256) valid from an hour before now for
// validity, and returns it and its key PEM encoded.
func GenerateCA(now time.Time, validity time.Duration) (caPEM, caKeyPEM []byte, err error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generating the CA key: %w", err)
	}
	caSerial, err := serial()
	if err != nil {
		return nil, nil, err
	}
	caTemplate := &x509.Certificate{
		SerialNumber:          caSerial,
		Subject:               pkix.Name{CommonName: caCommonName},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTemplate, caTemplate, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("creating the CA certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("encoding the CA key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
}

// IssueServingCertificate creates a serving certificate (ECDSA P-256) for hosts (IP
// addresses or DNS names), signed by the CA of caPEM (its first certificate) and
// caKeyPEM, valid for validity from now (never past the CA's end; backdated by an hour,
// or a tenth of a validity under 10 hours), and
// returns it and its key PEM encoded.
func IssueServingCertificate(caPEM, caKeyPEM []byte, hosts []string, now time.Time, validity time.Duration) (certPEM, keyPEM []byte, err error) {
	if len(hosts) == 0 {
		return nil, nil, errors.New("a serving certificate needs at least one host name or IP address")
	}
	caPair, err := tls.X509KeyPair(caPEM, caKeyPEM)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the CA: %w", err)
	}
	ca := caPair.Leaf
	if ca == nil {
		if ca, err = x509.ParseCertificate(caPair.Certificate[0]); err != nil {
			return nil, nil, fmt.Errorf("reading the CA: %w", err)
		}
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generating the serving key: %w", err)
	}
	certSerial, err := serial()
	if err != nil {
		return nil, nil, err
	}
	notAfter := now.Add(validity)
	if notAfter.After(ca.NotAfter) {
		notAfter = ca.NotAfter
	}
	template := &x509.Certificate{
		SerialNumber: certSerial,
		Subject:      pkix.Name{CommonName: hosts[0]},
		// Backdated for clocks behind ours, by a tenth of a short validity, so that a
		// renewal at two thirds of the lifetime comes after the issue.
		NotBefore:   now.Add(-min(time.Hour, validity/10)),
		NotAfter:    notAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			template.IPAddresses = append(template.IPAddresses, ip)
		} else {
			template.DNSNames = append(template.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, template, ca, &key.PublicKey, caPair.PrivateKey)
	if err != nil {
		return nil, nil, fmt.Errorf("creating the serving certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("encoding the serving key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
}

func serial() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("generating a serial number: %w", err)
	}
	return n, nil
}

// CertificateHosts lists the names a generated certificate is for: the host of addr
// (localhost and 127.0.0.1 when it is empty or unspecified) and the extra DNS names.
func CertificateHosts(addr string, dnsNames []string) ([]string, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("--addr %q: %w", addr, err)
	}
	var hosts []string
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		hosts = append(hosts, "localhost", "127.0.0.1")
	} else {
		hosts = append(hosts, host)
	}
	for _, n := range dnsNames {
		if n != "" && !slices.Contains(hosts, n) {
			hosts = append(hosts, n)
		}
	}
	return hosts, nil
}
