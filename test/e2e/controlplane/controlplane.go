// Package controlplane runs a throwaway Kubernetes control plane (etcd and
// kube-apiserver, no controller-manager, no scheduler, no nodes) on
// 127.0.0.1 for morph's end-to-end tests and for `make cluster`.
//
// Start picks random free ports, generates all certificates, starts both
// processes, waits until the API server is ready and writes a kubeconfig.
// Stop (idempotent, safe for concurrent use) stops kube-apiserver, then etcd,
// and removes the working directory.
//
// Processes never outlive their parent: they are started with
// Pdeathsig=SIGKILL from a thread that lives as long as the process, and a
// tiny /bin/sh "reaper" (in its own process group) removes the working
// directory if the parent dies without calling Stop, for example when a test
// panics or `go test -timeout` fires.
//
// The binaries come from AssetsDir; see FindAssets and hack/build-kube.sh.
package controlplane

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Binary names expected in the assets directory.
const (
	APIServerBinary = "kube-apiserver"
	EtcdBinary      = "etcd"
	KubectlBinary   = "kubectl"
)

// AdminUser is the user name of the kubeconfig's client certificate. It is
// in the system:masters group, so RBAC never denies it.
const AdminUser = "morph-e2e-admin"

// contextName names the cluster, user and context in the kubeconfig.
const contextName = "morph-e2e"

// serviceClusterIPRange is the (unused) service CIDR the API server requires.
const serviceClusterIPRange = "10.0.0.0/24"

// Options configures Start.
type Options struct {
	// AssetsDir holds the kube-apiserver and etcd binaries. Required.
	AssetsDir string
	// StartTimeout bounds the whole start-up (default 2m).
	StartTimeout time.Duration
	// StopGrace is how long each process gets to exit after SIGTERM before
	// it is killed (default 15s).
	StopGrace time.Duration
	// ExtraAPIServerArgs are appended to kube-apiserver's command line
	// (later flags win), e.g. "--feature-gates=...".
	ExtraAPIServerArgs []string
	// Logf receives progress messages; nil discards them.
	Logf func(format string, args ...any)
}

// ControlPlane is a running etcd + kube-apiserver pair.
type ControlPlane struct {
	// Dir is the working directory: certificates, etcd data, logs and the
	// kubeconfig. It is removed by Stop.
	Dir string
	// KubeconfigPath is an admin kubeconfig for the API server.
	KubeconfigPath string
	// APIServerURL is https://127.0.0.1:<port>.
	APIServerURL string
	// EtcdURL is http://127.0.0.1:<port>.
	EtcdURL string
	// CACertPEM is the CA that signed the API server's serving certificate
	// and the admin client certificate.
	CACertPEM []byte
	// APIServerLog and EtcdLog are the processes' combined output.
	APIServerLog, EtcdLog string

	admin     KeyPair
	opts      Options
	sp        *spawner
	etcd      *process
	apiserver *process
	reaper    *exec.Cmd
	reaperW   *os.File
	exited    chan struct{}

	stopOnce sync.Once
	stopErr  error
}

// Start starts etcd and kube-apiserver and waits until the API server is
// ready and the "default" namespace exists. On error everything started so
// far is stopped again.
func Start(ctx context.Context, opts Options) (_ *ControlPlane, err error) {
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = 2 * time.Minute
	}
	if opts.StopGrace <= 0 {
		opts.StopGrace = 15 * time.Second
	}
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	if err := CheckAssets(opts.AssetsDir); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, opts.StartTimeout)
	defer cancel()

	dir, err := os.MkdirTemp("", "morph-e2e-")
	if err != nil {
		return nil, fmt.Errorf("create control plane directory: %w", err)
	}
	cp := &ControlPlane{
		Dir:            dir,
		KubeconfigPath: filepath.Join(dir, "kubeconfig"),
		APIServerLog:   filepath.Join(dir, "kube-apiserver.log"),
		EtcdLog:        filepath.Join(dir, "etcd.log"),
		opts:           opts,
		sp:             newSpawner(),
	}
	defer func() {
		if err != nil {
			if stopErr := cp.Stop(); stopErr != nil {
				err = errors.Join(err, stopErr)
			}
		}
	}()
	if err := cp.startReaper(); err != nil {
		opts.Logf("warning: %v; %s may be left behind if this process dies", err, dir)
	}

	pki, err := cp.writePKI()
	if err != nil {
		return nil, err
	}
	if err := cp.startEtcd(ctx); err != nil {
		return nil, err
	}
	if err := cp.startAPIServer(ctx, pki); err != nil {
		return nil, err
	}
	if err := cp.waitDefaultNamespace(ctx); err != nil {
		return nil, err
	}
	if err := cp.writeKubeconfig(); err != nil {
		return nil, err
	}
	cp.exited = make(chan struct{})
	go func() {
		select {
		case <-cp.etcd.done:
		case <-cp.apiserver.done:
		}
		close(cp.exited)
	}()
	return cp, nil
}

// Exited is closed when etcd or kube-apiserver has exited, whether through
// Stop or not.
func (cp *ControlPlane) Exited() <-chan struct{} { return cp.exited }

// RESTConfig returns a new admin client configuration for the API server.
func (cp *ControlPlane) RESTConfig() *rest.Config {
	return &rest.Config{
		Host: cp.APIServerURL,
		TLSClientConfig: rest.TLSClientConfig{
			CAData:   cp.CACertPEM,
			CertData: cp.admin.CertPEM,
			KeyData:  cp.admin.KeyPEM,
		},
		QPS:   100,
		Burst: 200,
		// Never go through a proxy: everything is on 127.0.0.1.
		Proxy: func(*http.Request) (*url.URL, error) { return nil, nil },
	}
}

// KubectlPath is the kubectl binary next to the control plane binaries.
func (cp *ControlPlane) KubectlPath() string {
	return filepath.Join(cp.opts.AssetsDir, KubectlBinary)
}

// LogTails returns the last n lines of both process logs, for diagnostics.
func (cp *ControlPlane) LogTails(n int) string {
	return fmt.Sprintf("--- %s (last %d lines) ---\n%s\n--- %s (last %d lines) ---\n%s\n",
		cp.APIServerLog, n, fileTail(cp.APIServerLog, n), cp.EtcdLog, n, fileTail(cp.EtcdLog, n))
}

// Stop stops kube-apiserver, then etcd, and removes Dir. It is idempotent
// and safe to call concurrently; later calls return the first call's error.
func (cp *ControlPlane) Stop() error {
	cp.stopOnce.Do(func() {
		var errs []error
		for _, p := range []*process{cp.apiserver, cp.etcd} {
			if p == nil {
				continue
			}
			if err := p.stop(cp.opts.StopGrace); err != nil {
				errs = append(errs, err)
			}
		}
		cp.sp.close()
		if err := os.RemoveAll(cp.Dir); err != nil {
			errs = append(errs, fmt.Errorf("remove %s: %w", cp.Dir, err))
		}
		cp.stopReaper()
		cp.stopErr = errors.Join(errs...)
	})
	return cp.stopErr
}

// startReaper starts `sh` reading a pipe we hold: "done" means we cleaned up
// ourselves; EOF without it means we died, and it removes Dir (the children
// have been SIGKILLed by Pdeathsig by then).
func (cp *ControlPlane) startReaper() error {
	r, w, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("reaper pipe: %w", err)
	}
	// The child holds its own copy of the read end.
	defer func() { _ = r.Close() }()
	const script = `read -r line; [ "$line" = done ] && exit 0; sleep 1; rm -rf -- "$1"`
	cmd := exec.Command("/bin/sh", "-c", script, "morph-e2e-reaper", cp.Dir)
	cmd.Stdin = r
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // survives Ctrl-C of the parent's group
	if err := cmd.Start(); err != nil {
		_ = w.Close()
		return fmt.Errorf("start reaper: %w", err)
	}
	cp.reaper, cp.reaperW = cmd, w
	return nil
}

func (cp *ControlPlane) stopReaper() {
	if cp.reaper == nil {
		return
	}
	_, _ = io.WriteString(cp.reaperW, "done\n")
	_ = cp.reaperW.Close()
	done := make(chan struct{})
	go func() { _ = cp.reaper.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = cp.reaper.Process.Kill()
	}
}

// pkiFiles are the paths of the generated key material.
type pkiFiles struct {
	caCert, servingCert, servingKey, saKey, saPub string
}

func (cp *ControlPlane) writePKI() (pkiFiles, error) {
	pkiDir := filepath.Join(cp.Dir, "pki")
	if err := os.Mkdir(pkiDir, 0o700); err != nil {
		return pkiFiles{}, fmt.Errorf("create pki directory: %w", err)
	}
	ca, err := NewCA("morph-e2e-ca")
	if err != nil {
		return pkiFiles{}, err
	}
	serving, err := ca.ServingCert("kube-apiserver",
		[]net.IP{net.IPv4(127, 0, 0, 1), net.IPv4(10, 0, 0, 1)},
		[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"})
	if err != nil {
		return pkiFiles{}, err
	}
	cp.admin, err = ca.ClientCert(AdminUser, []string{"system:masters"})
	if err != nil {
		return pkiFiles{}, err
	}
	saKey, saPub, err := NewServiceAccountKey()
	if err != nil {
		return pkiFiles{}, err
	}
	cp.CACertPEM = ca.CertPEM
	f := pkiFiles{
		caCert:      filepath.Join(pkiDir, "ca.crt"),
		servingCert: filepath.Join(pkiDir, "apiserver.crt"),
		servingKey:  filepath.Join(pkiDir, "apiserver.key"),
		saKey:       filepath.Join(pkiDir, "sa.key"),
		saPub:       filepath.Join(pkiDir, "sa.pub"),
	}
	for path, data := range map[string][]byte{
		f.caCert: ca.CertPEM, f.servingCert: serving.CertPEM, f.servingKey: serving.KeyPEM,
		f.saKey: saKey, f.saPub: saPub,
	} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return pkiFiles{}, fmt.Errorf("write %s: %w", path, err)
		}
	}
	return f, nil
}

// startAttempts is how often a process is restarted with fresh ports when
// the port picked turned out to be taken in the meantime.
const startAttempts = 5

func (cp *ControlPlane) startEtcd(ctx context.Context) error {
	start := time.Now()
	dataDir := filepath.Join(cp.Dir, "etcd-data")
	for attempt := 1; ; attempt++ {
		port, err := freePort()
		if err != nil {
			return err
		}
		u := "http://127.0.0.1:" + strconv.Itoa(port)
		args := []string{
			"--name=default",
			"--data-dir=" + dataDir,
			"--listen-client-urls=" + u,
			"--advertise-client-urls=" + u,
			// Port 0: the kernel picks it; single member, nobody dials it.
			"--listen-peer-urls=http://127.0.0.1:0",
			"--unsafe-no-fsync=true",
			"--log-level=warn",
		}
		p, err := startProcess(cp.sp, "etcd", filepath.Join(cp.opts.AssetsDir, EtcdBinary), args, childEnv(), cp.EtcdLog)
		if err != nil {
			return err
		}
		cp.etcd = p
		err = waitReady(ctx, p, httpClient(nil), u+"/health", func(body []byte) bool {
			return strings.Contains(string(body), `"health":"true"`)
		})
		if err == nil {
			cp.EtcdURL = u
			cp.opts.Logf("etcd ready at %s after %v", u, time.Since(start).Round(time.Millisecond))
			return nil
		}
		if p.exited() && p.logContains("address already in use") && attempt < startAttempts {
			cp.opts.Logf("etcd: port %d was taken, retrying with another", port)
			if err := os.RemoveAll(dataDir); err != nil {
				return fmt.Errorf("remove etcd data of failed attempt: %w", err)
			}
			continue
		}
		return fmt.Errorf("start etcd: %w", err)
	}
}

func (cp *ControlPlane) startAPIServer(ctx context.Context, f pkiFiles) error {
	start := time.Now()
	adminCert, err := cp.admin.TLSCertificate()
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(cp.CACertPEM) {
		return errors.New("parse control plane CA certificate")
	}
	client := httpClient(&tls.Config{RootCAs: pool, Certificates: []tls.Certificate{adminCert}, MinVersion: tls.VersionTLS12})
	for attempt := 1; ; attempt++ {
		port, err := freePort()
		if err != nil {
			return err
		}
		u := "https://127.0.0.1:" + strconv.Itoa(port)
		args := []string{
			"--etcd-servers=" + cp.EtcdURL,
			"--bind-address=127.0.0.1",
			"--advertise-address=127.0.0.1",
			"--secure-port=" + strconv.Itoa(port),
			"--tls-cert-file=" + f.servingCert,
			"--tls-private-key-file=" + f.servingKey,
			"--client-ca-file=" + f.caCert,
			"--service-account-issuer=https://kubernetes.default.svc",
			"--service-account-key-file=" + f.saPub,
			"--service-account-signing-key-file=" + f.saKey,
			"--service-cluster-ip-range=" + serviceClusterIPRange,
			"--authorization-mode=RBAC",
			"--allow-privileged=true",
			// No controller-manager: nothing would create service account
			// tokens, and the kubernetes endpoints must not be reconciled
			// against 127.0.0.1.
			"--disable-admission-plugins=ServiceAccount",
			"--endpoint-reconciler-type=none",
			"--cert-dir=" + filepath.Join(cp.Dir, "apiserver-certs"),
		}
		args = append(args, cp.opts.ExtraAPIServerArgs...)
		p, err := startProcess(cp.sp, "kube-apiserver", filepath.Join(cp.opts.AssetsDir, APIServerBinary), args, childEnv(), cp.APIServerLog)
		if err != nil {
			return err
		}
		cp.apiserver = p
		err = waitReady(ctx, p, client, u+"/readyz", func(body []byte) bool { return strings.TrimSpace(string(body)) == "ok" })
		if err == nil {
			cp.APIServerURL = u
			cp.opts.Logf("kube-apiserver ready at %s after %v", u, time.Since(start).Round(time.Millisecond))
			return nil
		}
		if p.exited() && p.logContains("address already in use") && attempt < startAttempts {
			cp.opts.Logf("kube-apiserver: port %d was taken, retrying with another", port)
			continue
		}
		return fmt.Errorf("start kube-apiserver: %w", err)
	}
}

// waitDefaultNamespace waits for the API server's bootstrap controller to
// create the "default" namespace, which the webhook probes use.
func (cp *ControlPlane) waitDefaultNamespace(ctx context.Context) error {
	cs, err := kubernetes.NewForConfig(cp.RESTConfig())
	if err != nil {
		return fmt.Errorf("create client: %w", err)
	}
	var lastErr error
	for {
		_, lastErr = cs.CoreV1().Namespaces().Get(ctx, metav1.NamespaceDefault, metav1.GetOptions{})
		if lastErr == nil {
			return nil
		}
		if !apierrors.IsNotFound(lastErr) && ctx.Err() == nil {
			cp.opts.Logf("waiting for namespace default: %v", lastErr)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("namespace default was not created: %w (last error: %v)", ctx.Err(), lastErr)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (cp *ControlPlane) writeKubeconfig() error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[contextName] = &clientcmdapi.Cluster{Server: cp.APIServerURL, CertificateAuthorityData: cp.CACertPEM}
	cfg.AuthInfos[contextName] = &clientcmdapi.AuthInfo{ClientCertificateData: cp.admin.CertPEM, ClientKeyData: cp.admin.KeyPEM}
	cfg.Contexts[contextName] = &clientcmdapi.Context{Cluster: contextName, AuthInfo: contextName, Namespace: metav1.NamespaceDefault}
	cfg.CurrentContext = contextName
	if err := clientcmd.WriteToFile(*cfg, cp.KubeconfigPath); err != nil {
		return fmt.Errorf("write kubeconfig %s: %w", cp.KubeconfigPath, err)
	}
	return nil
}

// waitReady polls endpoint until ok(body) with a 200 status, the process exits,
// or ctx ends.
func waitReady(ctx context.Context, p *process, client *http.Client, endpoint string, ok func([]byte) bool) error {
	var last string
	for {
		if p.exited() {
			return p.exitError()
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint, nil)
		if err != nil {
			return fmt.Errorf("build request for %s: %w", endpoint, err)
		}
		resp, err := client.Do(req)
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK && ok(body) {
				return nil
			}
			last = fmt.Sprintf("HTTP %d: %.300s", resp.StatusCode, body)
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready at %s: %w (last: %s); last log lines from %s:\n%s",
				p.name, endpoint, ctx.Err(), last, p.logPath, p.logTail(40))
		case <-p.done:
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// httpClient returns a client that never uses a proxy.
func httpClient(tlsConfig *tls.Config) *http.Client {
	return &http.Client{
		Timeout:   5 * time.Second,
		Transport: &http.Transport{Proxy: nil, TLSClientConfig: tlsConfig, DisableKeepAlives: true},
	}
}

// freePort asks the kernel for a free TCP port on 127.0.0.1. The port is
// released before the caller binds it; Start retries if it was taken.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port on 127.0.0.1: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		return 0, fmt.Errorf("release port %d: %w", port, err)
	}
	return port, nil
}

// childEnv is this process's environment without proxy settings, so that the
// control plane (which calls webhooks on 127.0.0.1) never uses a proxy.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch strings.ToLower(name) {
		case "http_proxy", "https_proxy", "all_proxy", "no_proxy":
			continue
		}
		env = append(env, kv)
	}
	return append(env, "NO_PROXY=127.0.0.1,localhost", "no_proxy=127.0.0.1,localhost")
}
